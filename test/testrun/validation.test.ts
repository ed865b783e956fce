// Validation of updates (docs/device-tests.md): a deployment naming a validation config runs it on
// each device that installed; the device whose run fails is `failed: validation` with a link to the
// run, counts for the error threshold (the deployment pauses) and its agent's rollback_command runs.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { openStream } from "../helpers/events.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { uploadConfig } from "./run-helpers.ts";

const agents: Array<Agent & { dir: string }> = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);

interface Member {
  device: number;
  state: string;
  reason: string | null;
  output: string | null;
}

test("a deployment with a validation config: the device whose validation fails is failed: validation (link to its run), the threshold pauses, its rollback_command runs", async () => {
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
  // The validation fails on a device whose data dir holds `bad` (cases run in <data_dir>/tests/<run>/artifacts/<run>).
  // Where the data dir also holds the fifo `gate`, the validation first waits for a line on it: the
  // test lets the bad device fail only once the others installed (else the pause could come first
  // and leave one of them unoffered).
  await uploadConfig(server, "validate.yml", "tests:\n  smoke:\n  - exec:\n      name: smoke\n      command: [sh, -c, 'if [ -p ../../../../gate ]; then read go < ../../../../gate; fi; test ! -e ../../../../bad']\n");
  const ids: number[] = [];
  const rollback: string[] = [];
  for (const name of ["ok-1", "ok-2", "bad-3"]) {
    const dir = tempDir("labgate-validate-");
    rollback.push(join(dir, "rollback.txt"));
    const agent = startAgent(server, {
      name,
      device_type: "board",
      software_version: "v1",
      update_check_interval: 0.3,
      install_command: ["sh", "-c", 'cp "$1" "$2"', "install", "{file}", join(dir, "image.bin")],
      rollback_command: ["sh", "-c", 'echo "rolled back $1" > "$2"', "rollback", "{version}", join(dir, "rollback.txt")],
      tests: { enabled: true },
    } as AgentOptions);
    agents.push(agent);
    ids.push(await approveAgent(server, agent));
    await untilConnected(server, ids[ids.length - 1]!);
    if (name === "bad-3") {
      writeFileSync(join(agent.config.data_dir, "bad"), "");
      execFileSync("mkfifo", [join(agent.config.data_dir, "gate")]);
    }
  }
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "boards" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: ids, remove: [] })).status, 200);

  // Who may: svc_tests_rw and the test permission on every device of the group; a config that cannot run is refused.
  const body = { group, version: "v2", phases: [100], error_percent: 30, validation: { config: "validate.yml" } };
  await server.call("POST", "/api/v1/permissions", { user_id: "ops", resource: "group", resource_id: group, permission: "update" });
  await server.call("POST", "/api/v1/permissions", { user_id: "ops", resource: "group", resource_id: group, permission: "read" });
  const noTests = await server.call("POST", "/api/v2/deployments", body, server.token(["tests_ro"], "ops"));
  assert.deepEqual([noTests.status, noTests.body.error], [403, 'field "validation": needs svc_tests_rw']);
  const noPermission = await server.call("POST", "/api/v2/deployments", body, server.token(["tests_rw"], "ops"));
  assert.deepEqual([noPermission.status, noPermission.body.error], [403, `field "validation": no test permission on devices 'ok-1', 'ok-2', 'bad-3'`]);
  const missing = await server.call("POST", "/api/v2/deployments", { ...body, validation: { config: "nosuch.yml" } });
  assert.equal(missing.status, 404, JSON.stringify(missing.body));

  const stream = await openStream(server, server.adminToken);
  let id: number;
  try {
    const created = await server.call("POST", "/api/v2/deployments", body);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(created.body.validation, { config: "validate.yml", suite: "" });
    id = created.body.id as number;
    const othersInstalled = async () =>
      ((await server.call("GET", `/api/v2/deployments/${id}/devices?limit=10`)).body as Member[]).filter((m) => m.device !== ids[2] && m.state === "installed").length === 2;
    await waitFor(othersInstalled, 30_000, "ok-1 and ok-2 installed");
    const gate = await open(join(agents[2]!.config.data_dir, "gate"), "w");
    await gate.write("go\n");
    await gate.close();
    await stream.next((e) => e.event === "deployment" && e.data.deployment === id && e.data.status === "paused", 30_000, "paused at the threshold");
  } finally {
    stream.close();
  }
  const view = (await server.call("GET", `/api/v2/deployments/${id}`)).body;
  assert.match(view.pause_reason, /error threshold/);

  // The failed device's row names its validation run; the others passed theirs and stay installed.
  const members = (await server.call("GET", `/api/v2/deployments/${id}/devices?limit=10`)).body as Member[];
  const failed = members.find((m) => m.state === "failed")!;
  assert.equal(failed.device, ids[2]);
  assert.equal(failed.reason, "validation");
  const runId = /test run ([0-9a-f-]{36}) failed/.exec(failed.output ?? "")?.[1];
  assert.ok(runId, failed.output ?? "");
  assert.match(failed.output!, new RegExp(`/#/runs/${runId}$`));
  assert.deepEqual(members.filter((m) => m.state !== "failed").map((m) => m.state), ["installed", "installed"]);
  const rows = (await server.call("GET", `/api/v1/test-runs/${runId}/report?format=json`)).body as Array<Record<string, string>>;
  assert.deepEqual(rows.map((r) => [r["device name"], r.test_name ?? r["test name"], r.status]), [["bad-3", "exit_code[test_config0]", "failed"]]);

  // Its agent ran its rollback_command with the version; the others did not.
  await waitFor(() => existsSync(rollback[2]!), 10_000, "bad-3 rolled back");
  assert.equal(readFileSync(rollback[2]!, "utf8"), "rolled back v2\n");
  assert.deepEqual([existsSync(rollback[0]!), existsSync(rollback[1]!)], [false, false]);
});
