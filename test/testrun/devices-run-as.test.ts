// The agent's `tests.run_as` (docs/device-tests.md): a device test's programs run as that user,
// not as the agent (which holds the device key), and what they write still arrives at the
// gateway. A real `labgate agent` child process; switching users needs root (CI runs as root).
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, test } from "node:test";
import { runInProcess } from "../helpers/cli.ts";
import { removeDir, tempDir, useTestServer } from "../helpers/server.ts";
import { ensureUser, isRoot, RUNNER } from "../helpers/users.ts";
import { FAST_SERVER, spawnConnectedAgent } from "../update/helpers/agents.ts";
import { escapeSteps, ESCAPES, marked, newMark, sweep } from "./escapes.ts";
import { reportRows, uploadConfig, waitRun } from "./run-helpers.ts";

const children: ChildProcess[] = [];
const dirs: string[] = [];
after(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const dir of dirs) removeDir(dir);
});

test("an unknown tests.run_as user stops the agent at start with exit 2, naming the key", async () => {
  const dir = tempDir("labgate-agent-runas-");
  dirs.push(dir);
  writeFileSync(join(dir, "agent.yaml"), "server: http://127.0.0.1:9\nmac_address: 02:00:00:00:00:01\ntests: {enabled: true, run_as: labgate-no-such-user}\n");
  const { code, stderr } = await runInProcess(["agent", "--config", join(dir, "agent.yaml"), "--data-dir", join(dir, "data")]);
  assert.equal(code, 2);
  assert.match(stderr, /agent config key tests\.run_as: no user 'labgate-no-such-user' on this machine/);
  assert.equal(existsSync(join(dir, "data")), false);
});

describe("tests.run_as on a device", { skip: !isRoot && "needs root to create the user and switch to it (CI runs as root)" }, () => {
  const server = useTestServer({ ...FAST_SERVER, test_server: { device_wait: 5 } });

  test("the run's programs run as that user: the agent's key is out of reach, the artifacts arrive", async () => {
    ensureUser(RUNNER);
    // A work dir the user can reach (the agent makes it 0730, its group the user's).
    const work = join(tmpdir(), `labgate-agent-runs-${process.pid}`);
    dirs.push(work);
    const agent = await spawnConnectedAgent(server, ["name: secure", `tests: {enabled: true, max_duration: 120, run_as: ${RUNNER}, work_dir: ${work}}`]);
    children.push(agent.child);
    dirs.push(dirname(agent.config));
    const key = join(dirname(agent.config), "data", "device-key.pem");
    assert.ok(existsSync(key));

    await uploadConfig(
      server,
      "secure.yml",
      [
        "tests:",
        "  board:",
        "    machines: [device:secure]",
        "    tests:",
        "    - exec:",
        "        name: who",
        "        command: [sh, -c, 'id -un > who.txt; echo written']",
        "        stdout_contains: written",
        "    - exec:",
        "        name: key",
        `        command: [cat, ${key}]`,
        "        expect_exit: 1",
        "        stderr_contains: Permission denied",
        "",
      ].join("\n"),
    );
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "secure.yml" });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    const run = await waitRun(server, started.body.id as string, undefined, 30_000);
    const rows = (await server.call("GET", `/api/v1/test-runs/${run.id}/report?format=json`)).body as Array<Record<string, string>>;
    assert.deepEqual(
      rows.map((r) => [r["device name"], r["test name"], r.status, r.message]),
      [
        ["secure", "exit_code[test_config0]", "passed", ""],
        ["secure", "stdout[test_config0]", "passed", ""],
        ["secure", "exit_code[test_config1]", "passed", ""],
        ["secure", "stderr[test_config1]", "passed", ""],
      ],
    );
    assert.equal(run.status, "finished");
    const who = await server.request(`/api/v1/test-runs/${run.id}/artifacts/secure/who.txt`, { token: server.adminToken });
    assert.equal(who.status, 200);
    assert.equal(await who.text(), `${RUNNER}\n`);
  });

  test("nothing a share starts outlives it: each way of escaping is gone when the run ends", async () => {
    ensureUser(RUNNER);
    const work = join(tmpdir(), `labgate-agent-runs-contained-${process.pid}`);
    dirs.push(work);
    const agent = await spawnConnectedAgent(server, ["name: contained", `tests: {enabled: true, max_duration: 120, run_as: ${RUNNER}, work_dir: ${work}}`]);
    children.push(agent.child);
    dirs.push(dirname(agent.config));
    const marks = ESCAPES.map(newMark);
    try {
      const steps = escapeSteps(ESCAPES, marks).replace(/^/gm, "  ");
      await uploadConfig(server, "contained.yml", `tests:\n  board:\n    machines: [device:contained]\n    tests:\n${steps}`);
      const started = await server.call("POST", "/api/v1/test-runs", { config_name: "contained.yml" });
      assert.equal(started.status, 200, JSON.stringify(started.body));
      const run = await waitRun(server, started.body.id as string, undefined, 30_000);
      assert.equal(run.status, "finished", JSON.stringify(await reportRows(server, run.id)));
      for (let i = 0; i < ESCAPES.length; i++) assert.deepEqual(marked(marks[i]), [], `${ESCAPES[i][0]}: processes of the share are left after it ended`);
    } finally {
      sweep(marks);
    }
  });
});
