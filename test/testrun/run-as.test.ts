/**
 * test_server.run_as (issue 24): what a config starts runs as another user, who cannot read the
 * server's keys, database, tokens or another run's artifacts, in a clean environment; its own
 * artifacts still arrive, and an abort still ends its whole process group. Needs root (CI runs
 * as root) to create the user and switch to it; as another user, the start-up refusal is checked.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ConfigError } from "../../src/config/config.ts";
import { labgate, startServe, type ServeProcess } from "../helpers/cli.ts";
import { callWith, removeDir, requestAt, startTestServer, tempDir, type TestServer, useTestServer, waitFor } from "../helpers/server.ts";
import { ensureUser, isRoot, RUNNER } from "../helpers/users.ts";
import { alive, getRun, reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const root = isRoot;
const ensureRunner = () => ensureUser(RUNNER);

describe("test_server.run_as as root", { skip: !root && "needs root (CI runs as root); see the test below" }, () => {
  let runner: { uid: number; gid: number };
  const secret = "LABGATE_PROBE_SECRET";

  before(() => {
    runner = ensureRunner();
    process.env[secret] = "must-not-reach-tests";
  });
  const server = useTestServer({ test_server: { run_as: RUNNER } as never });
  after(() => {
    delete process.env[secret];
    // The runs' work dir (`<data_dir>-runs` by default) is beside the data dir.
    removeDir(`${server.dataDir}-runs`);
  });

  test("a config reading keys, the database, tokens and another run's artifacts is refused; its own artifacts arrive", () => attackRun(server, runner));
  test("an abort kills the whole process group of a run_as run", () => abortRun(server, runner));
});

describe("test_server.run_as from a server that is not root and holds only CAP_SETUID and CAP_SETGID (the systemd unit)", { skip: !root && "needs root to create the users" }, () => {
  const SERVER_USER = "labgate-test-server";
  // A runner of its own: without a cgroup it may create, this server ends each run by killing every process of its runner.
  const CAPS_RUNNER = "labgate-test-runner-caps";
  let runner: { uid: number; gid: number };
  let serve: ServeProcess;
  let server: TestServer;
  const dir = tempDir("labgate-caps-");

  before(async () => {
    runner = ensureUser(CAPS_RUNNER);
    try {
      execFileSync("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER], { stdio: "ignore" });
    } catch {
      // exists already
    }
    // As the unit's SupplementaryGroups: the server is in the runner's group.
    execFileSync("usermod", ["-a", "-G", CAPS_RUNNER, SERVER_USER]);
    const data = join(dir, "data");
    mkdirSync(data, { mode: 0o700 });
    execFileSync("chown", [`${SERVER_USER}:${SERVER_USER}`, dir, data]);
    // The work dir's parent is the service's (systemd makes /var/lib/labgate-runs for it).
    const config = join(dir, "labgate.yaml");
    writeFileSync(config, `data_dir: ${data}\nlisten: 127.0.0.1:0\nlog_level: warn\ntest_server: {run_as: ${CAPS_RUNNER}}\n`);
    chmodSync(config, 0o644);
    chmodSync(dir, 0o755);
    const [node, bundle] = await labgate();
    // What the unit does: User=, SupplementaryGroups=, AmbientCapabilities=CAP_SETUID CAP_SETGID, UMask=0077.
    const asService = ["setpriv", "--reuid", SERVER_USER, "--regid", SERVER_USER, "--init-groups", "--inh-caps=+setuid,+setgid", "--ambient-caps=+setuid,+setgid", "--", "sh", "-c", 'umask 077; exec "$@"', "sh", node, bundle];
    serve = await startServe(["serve", "--config", config], { command: asService, cwd: dir });
    const token = readFileSync(join(data, "admin.token"), "utf8").trim();
    const request = requestAt(serve.url);
    server = { url: serve.url, dataDir: data, adminToken: token, request, call: callWith(request, token) } as TestServer;
  });
  after(async () => {
    await serve?.stop();
    removeDir(dir);
  });

  test("the server keeps exactly CAP_SETUID and CAP_SETGID; its tests get none and cannot read the data dir; their files arrive", async () => {
    const status = readFileSync(`/proc/${serve.child.pid}/status`, "utf8");
    assert.match(status, /^CapEff:\s+00000000000000c0$/m);
    assert.match(status, new RegExp(`^Uid:\\s+${execFileSync("id", ["-u", SERVER_USER], { encoding: "utf8" }).trim()}\\s`, "m"));
    await attackRun(server, runner);
  });

  test("an abort kills the run's process group although the server may not signal another user", () => abortRun(server, runner));
});

/** Runs a victim and then an attacking config on `server` (run_as: the runner): every attack is refused, its own files arrive. */
async function attackRun(server: TestServer, runner: { uid: number; gid: number }): Promise<void> {
  const data = server.dataDir;
  assert.equal(statSync(data).mode & 0o777, 0o700);
  await uploadConfig(server, "victim.yml", "tests:\n  v:\n  - exec:\n      command: echo victim-secret > secret.txt\n");
  const victim = await waitRun(server, (await trigger(server, { config_name: "victim.yml" })).id);
  assert.equal(victim.status, "finished", String(victim.error));

  // The database is a file of the data dir on the embedded engine only (PostgreSQL's URL never reaches a test: `env` below).
  const health = (await server.call("GET", "/api/health")).body as { database: { engine: string } };
  const database = health.database.engine === "embedded" ? [join(data, "labgate.db")] : [];
  const targets = [join(data, "keys", readdirSync(join(data, "keys"))[0]), ...database, join(data, "admin.token"), join(data, "admin.password"), join(data, "testrun", "artifacts", victim.id, "secret.txt")];
  for (const target of targets) assert.ok(existsSync(target), target);
  const reads = targets.map((t, i) => `  - exec:\n      name: read${i}\n      command: cat ${t}\n      expect_exit: 1\n      stderr_contains: Permission denied\n`).join("");
  const yaml =
    "tests:\n  attack:\n" +
    reads +
    `  - exec:\n      name: who\n      command: id -u; id -g; id -G\n      stdout_regex: "^${runner.uid}\\n${runner.gid}\\n${runner.gid}\\n$"\n` +
    // No capability at all, ambient ones included (the server under systemd holds CAP_SETUID and CAP_SETGID).
    `  - exec:\n      name: caps\n      command: grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status | cut -f2\n      stdout_regex: "^(0{16}\\\\n){4}$"\n` +
    `  - exec:\n      name: env\n      command: env\n      stdout_not_regex: [LABGATE, must-not-reach]\n      save_output: env.txt\n` +
    `  - exec:\n      name: own\n      command: mkdir -p sub && echo mine > sub/out.txt && echo top > top.txt && ln -s ${join(data, "admin.token")} token-link\n` +
    `  - file:\n      name: token\n      path: ${join(data, "admin.token")}\n      readable: false\n` +
    `  - file:\n      name: token-content\n      path: ${join(data, "admin.token")}\n      regex: "."\n` +
    `  - file:\n      name: overwrite\n      path: ${join(data, "admin.password")}\n      write: pwned\n` +
    `  - junit:\n      name: report\n      report: ${join(data, "admin.token")}\n`;
  await uploadConfig(server, "attack.yml", yaml);
  const attack = await waitRun(server, (await trigger(server, { config_name: "attack.yml" })).id);
  const rows = await reportRows(server, attack.id);
  // "read0/exit_code": the device name and the case, without its parameter set.
  const byName = Object.fromEntries(rows.map((r) => [`${r["device name"]}/${r["test name"].split("[")[0]}`, r]));
  for (let i = 0; i < targets.length; i++) {
    for (const check of ["exit_code", "stderr"]) assert.equal(byName[`read${i}/${check}`]?.status, "passed", `${targets[i]}: ${JSON.stringify(byName[`read${i}/${check}`])}`);
  }
  for (const name of ["who/stdout", "caps/stdout", "env/stdout", "own/exit_code", "token/access"]) assert.equal(byName[name]?.status, "passed", `${name}: ${JSON.stringify(byName[name])}`);
  assert.match(byName["token/exists"]?.message ?? "", /Permission denied/);
  assert.match(byName["token-content/content"]?.message ?? "", /Permission denied/);
  assert.match(byName["overwrite/write"]?.message ?? "", /Permission denied/);
  assert.match(byName["report/command"]?.message ?? "", /no JUnit report found/);
  assert.notEqual(readFileSync(join(data, "admin.password"), "utf8").trim(), "pwned");

  // Its own files arrived (the link too, as a link the artifact routes never follow); nothing of the server's did.
  const list = (await server.call("GET", `/api/v1/test-runs/${attack.id}/artifacts`)).body as Array<{ name: string }>;
  assert.deepEqual(list.map((a) => a.name), ["env.txt", "sub/out.txt", "top.txt"]);
  assert.equal(await (await server.request(`/api/v1/test-runs/${attack.id}/artifacts/sub/out.txt`, { token: server.adminToken })).text(), "mine\n");
  assert.equal((await server.request(`/api/v1/test-runs/${attack.id}/artifacts/token-link`, { token: server.adminToken })).status, 404);
  const token = readFileSync(join(data, "admin.token"), "utf8").trim();
  for (const a of list) assert.ok(!(await (await server.request(`/api/v1/test-runs/${attack.id}/artifacts/${a.name}`, { token: server.adminToken })).text()).includes(token), a.name);
  // The work dir keeps nothing of finished runs.
  assert.deepEqual(readdirSync(`${data}-runs`), []);
}

/** A run_as run's shell and its background child both end when the run is aborted. */
async function abortRun(server: TestServer, runner: { uid: number; gid: number }): Promise<void> {
  await uploadConfig(server, "long.yml", "tests:\n  l:\n  - exec:\n      command: sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait\n      timeout: 600\n");
  const run = await trigger(server, { config_name: "long.yml" });
  const dir = join(`${server.dataDir}-runs`, run.id);
  const pids = await waitFor(() => {
    const read = (name: string) => (existsSync(join(dir, name)) ? Number(readFileSync(join(dir, name), "utf8")) : 0);
    const [bg, sh] = [read("bg.pid"), read("sh.pid")];
    return bg && sh ? [bg, sh] : undefined;
  }, 10_000, "the run's pid files");
  for (const pid of pids) {
    assert.ok(alive(pid));
    assert.equal(statSync(`/proc/${pid}`).uid, runner.uid, "runs as the runner");
  }
  assert.equal((await server.call("DELETE", `/api/v1/test-runs/${run.id}`)).status, 200);
  await waitRun(server, run.id);
  assert.equal((await getRun(server, run.id)).status, "aborted");
  await waitFor(() => pids.every((pid) => !alive(pid)), 10_000, "the process group to end");
}

test("run_as names a user this server cannot switch to, or no user: the start fails naming the key", async () => {
  const unknown = tempDir();
  try {
    await assert.rejects(startTestServer({ test_server: { run_as: "no-such-user-labgate" } as never }, unknown), (error: Error) => error instanceof ConfigError && /config key test_server\.run_as: no user 'no-such-user-labgate'/.test(error.message));
    await assert.rejects(startTestServer({ test_server: { run_as: "root" } as never }, tempDir()), /config key test_server\.run_as: 'root' is root/);
    if (!root) await assert.rejects(startTestServer({ test_server: { run_as: "nobody" } as never }, tempDir()), /config key test_server\.run_as: this process cannot start programs as nobody/);
  } finally {
    removeDir(unknown);
  }
});
