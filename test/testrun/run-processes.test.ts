/**
 * Nothing a run starts outlives it (issue 39.3): however a test's program leaves (a background
 * job, setsid, nohup, a double fork, a user and pid namespace, a watcher loop), once the run is
 * over none of its processes is left, and a watcher of one run never reaches the next run's
 * files. Each run's programs are marked (a variable and their command line); after the run this
 * process looks through /proc for the mark. With a cgroup v2 this process may write, a run is a
 * cgroup; a server that is not root and has none sweeps its test user instead (both here). And a
 * test process gets exactly its own group and no_new_privs. Needs root (CI runs as root).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { labgate, startServe, type ServeProcess } from "../helpers/cli.ts";
import { callWith, removeDir, requestAt, startTestServer, tempDir, type TestServer, useTestServer, waitFor } from "../helpers/server.ts";
import { ensureUser, isRoot, RUNNER } from "../helpers/users.ts";
import { aliveStep, escapeSteps, ESCAPES, marked, newMark, step, sweep } from "./escapes.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

/** Runs each escape of `escapes` in one run on `server`: each was alive during the run; none is after it. */
async function escapeRun(server: TestServer, escapes: Array<[string, string]>, configName: string): Promise<void> {
  const marks = escapes.map(newMark);
  try {
    const yaml = "tests:\n  escape:\n" + escapeSteps(escapes, marks);
    await uploadConfig(server, configName, yaml);
    const run = await waitRun(server, (await trigger(server, { config_name: configName })).id, undefined, 30_000);
    assert.equal(run.status, "finished", `${String(run.error)}: ${JSON.stringify(await reportRows(server, run.id))}`);
    for (let i = 0; i < escapes.length; i++) assert.deepEqual(marked(marks[i]), [], `${escapes[i][0]}: processes of the run are left after it ended`);
  } finally {
    sweep(marks);
  }
}

/**
 * Run 1 leaves a watcher that rewrites every `result.txt` and copies every `secret.txt` in the
 * working directory of any process it can see; run 2 writes both and reads its result back.
 */
async function watcherRun(server: TestServer): Promise<void> {
  const mark = newMark();
  const stolen = tempDir("labgate-stolen-");
  chmodSync(stolen, 0o1777);
  try {
    const watcher = `export LABGATE_MARK=${mark}; while true; do for d in /proc/[0-9]*/cwd; do [ -f "$d/result.txt" ] && echo pwned > "$d/result.txt"; [ -f "$d/secret.txt" ] && cp "$d/secret.txt" ${stolen}/; done; sleep 0.05; done >/dev/null 2>&1 & sleep 0.3`;
    await uploadConfig(server, "watcher.yml", "tests:\n  one:\n" + step("watch", watcher) + aliveStep("alive", mark));
    const first = await waitRun(server, (await trigger(server, { config_name: "watcher.yml" })).id, undefined, 30_000);
    assert.equal(first.status, "finished", String(first.error));
    await uploadConfig(server, "victim.yml", "tests:\n  two:\n" + step("work", "echo original > result.txt; echo run2-secret > secret.txt; sleep 1; cat result.txt", '      stdout_regex: "^original\\n$"\n'));
    const second = await waitRun(server, (await trigger(server, { config_name: "victim.yml" })).id, undefined, 30_000);
    assert.equal(second.status, "finished", JSON.stringify(await reportRows(server, second.id)));
    assert.equal(await (await server.request(`/api/v1/test-runs/${second.id}/artifacts/result.txt`, { token: server.adminToken })).text(), "original\n");
    assert.deepEqual(readdirSync(stolen), []);
  } finally {
    sweep([mark]);
  }
}

/** One run of `command`; returns its stdout (the exec module saves it). */
async function outputOf(server: TestServer, name: string, command: string): Promise<string> {
  await uploadConfig(server, `${name}.yml`, `tests:\n  ${name}:\n` + step(name, command) + "      save_output: out.txt\n");
  const run = await waitRun(server, (await trigger(server, { config_name: `${name}.yml` })).id);
  assert.equal(run.status, "finished", String(run.error));
  return await (await server.request(`/api/v1/test-runs/${run.id}/artifacts/out.txt`, { token: server.adminToken })).text();
}

const NO_NEW_PRIVS = "grep NoNewPrivs /proc/self/status";

describe("a run_as run's processes end with it", { skip: !isRoot && "needs root (CI runs as root)" }, () => {
  before(() => ensureUser(RUNNER));
  const server = useTestServer({ test_server: { run_as: RUNNER } as never });
  after(() => removeDir(`${server.dataDir}-runs`));

  for (const escape of ESCAPES) test(`${escape[0]} is gone when the run ends`, () => escapeRun(server, [escape], `escape-${ESCAPES.indexOf(escape)}.yml`));
  test("a watcher that run 1 left cannot rewrite or copy run 2's files", () => watcherRun(server));
  test("a program that left its group holding the output pipes ends with its command's timeout, not when it likes", async () => {
    const mark = newMark();
    try {
      await uploadConfig(server, "hold.yml", "tests:\n  hold:\n" + step("hold", `export LABGATE_MARK=${mark}; setsid sleep 300 & echo started`, "      timeout: 1\n"));
      const run = await waitRun(server, (await trigger(server, { config_name: "hold.yml" })).id);
      assert.equal(run.status, "failed");
      assert.match((await reportRows(server, run.id))[0].message, /timed out after 1 s/);
      assert.deepEqual(marked(mark), []);
    } finally {
      sweep([mark]);
    }
  });
  test("a test process has no_new_privs: setuid programs give it nothing", async () => assert.match(await outputOf(server, "nnp", NO_NEW_PRIVS), /^NoNewPrivs:\s+1$/m));
});

describe("a run's processes end with it without run_as", { skip: !isRoot && "needs root (CI runs as root)" }, () => {
  const server = useTestServer();

  test("every way of escaping is gone when the run ends", () => escapeRun(server, ESCAPES, "escapes.yml"));
  test("a test process of the server's own user has no_new_privs too", async () => assert.match(await outputOf(server, "nnp", NO_NEW_PRIVS), /^NoNewPrivs:\s+1$/m));
});

describe("a run_as test gets its own group and no other", { skip: !isRoot && "needs root to create the users" }, () => {
  const USER = "labgate-test-grouped";
  const EXTRA = "labgate-test-extra";
  let ids: { uid: number; gid: number };
  const server = useTestServer(() => {
    ids = ensureUser(USER);
    try {
      execFileSync("groupadd", ["--system", EXTRA], { stdio: "ignore" });
    } catch {
      // exists already
    }
    execFileSync("usermod", ["-a", "-G", EXTRA, USER]);
    return { test_server: { run_as: USER } as never };
  });
  after(() => removeDir(`${server.dataDir}-runs`));

  test("id -G prints its gid alone, although /etc/group gives the user another group", async () => {
    assert.match(execFileSync("id", ["-Gn", USER], { encoding: "utf8" }), new RegExp(`\\b${EXTRA}\\b`));
    assert.equal(await outputOf(server, "groups", "id -u; id -G"), `${ids.uid}\n${ids.gid}\n`);
  });
});

/** The cgroup v2 mount and the cgroup v2 directory of this process (root), or undefined without one. */
function ownCgroup(): { mount: string; dir: string } | undefined {
  const own = /^0::(\/.*)$/m.exec(readFileSync("/proc/self/cgroup", "utf8"))?.[1];
  const mount = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" "))
    .find((fields) => fields[fields.indexOf("-") + 1] === "cgroup2");
  return own && mount && mount[3] === "/" ? { mount: mount[4], dir: join(mount[4], own) } : undefined;
}

/**
 * A `labgate serve` child with run_as `runner`: `service` as the systemd unit runs it (not root,
 * CAP_SETUID and CAP_SETGID only, in the runner's group); `delegated` the same in a cgroup of its
 * own that it owns, as `Delegate=yes` gives it (where this machine has a cgroup v2 root may
 * write); `root` as root with the cgroup v2 mount read-only to it (as `ProtectControlGroups=yes`).
 */
function spawnedServer(runner: string, way: "service" | "delegated" | "root") {
  const SERVER_USER = "labgate-test-server";
  const dir = tempDir("labgate-svc-");
  let serve: ServeProcess;
  let cgroup: string | undefined;
  const server = {} as TestServer & { log: () => string; cgroup: () => string | undefined };
  before(async () => {
    ensureUser(runner);
    const data = join(dir, "data");
    mkdirSync(data, { mode: 0o700 });
    const config = join(dir, "labgate.yaml");
    writeFileSync(config, `data_dir: ${data}\nlisten: 127.0.0.1:0\nlog_level: info\ntest_server: {run_as: ${runner}}\n`);
    chmodSync(config, 0o644);
    chmodSync(dir, 0o755);
    const [node, bundle] = await labgate();
    const cgroups = ownCgroup();
    let command: string[];
    if (way === "root") {
      command = cgroups ? ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", 'mount -o remount,bind,ro "$0" && exec "$@"', cgroups.mount, node, bundle] : [node, bundle];
    } else {
      const owner = ensureUser(SERVER_USER);
      execFileSync("usermod", ["-a", "-G", runner, SERVER_USER]);
      execFileSync("chown", [`${SERVER_USER}:${SERVER_USER}`, dir, data]);
      command = ["setpriv", "--reuid", SERVER_USER, "--regid", SERVER_USER, "--init-groups", "--inh-caps=+setuid,+setgid", "--ambient-caps=+setuid,+setgid", "--", "sh", "-c", 'umask 077; exec "$@"', "sh", node, bundle];
      if (way === "delegated" && cgroups) {
        try {
          cgroup = join(cgroups.dir, `labgate-test-svc-${process.pid}-${randomBytes(3).toString("hex")}`);
          mkdirSync(cgroup);
          for (const file of ["", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"]) chownSync(join(cgroup, file), owner.uid, owner.gid);
          command = ["sh", "-c", 'echo 0 > "$0/cgroup.procs" && exec "$@"', cgroup, ...command];
        } catch {
          cgroup = undefined;
        }
      }
    }
    serve = await startServe(["serve", "--config", config], { command, cwd: dir });
    const token = readFileSync(join(data, "admin.token"), "utf8").trim();
    const request = requestAt(serve.url);
    Object.assign(server, { url: serve.url, dataDir: data, adminToken: token, request, call: callWith(request, token), log: () => serve.stderr() + serve.stdout(), cgroup: () => cgroup });
  });
  after(async () => {
    await serve?.stop();
    if (cgroup && existsSync(cgroup)) rmdirSync(cgroup);
    removeDir(dir);
  });
  return server;
}

/** Waits for a line of the server's log (the logger writes after the listening line). */
const logged = (server: { log: () => string }, line: RegExp) => waitFor(() => line.test(server.log()), 5_000, `a log line ${line}: ${server.log()}`);

describe("a run's processes end with it on a server that may not signal its test user (the systemd unit, no cgroup)", { skip: !isRoot && "needs root to create the users" }, () => {
  // A user of its own: this server kills every process of it when a run ends.
  const server = spawnedServer("labgate-test-runner-sweep", "service");

  test("the start log says how runs are contained", async () => void (await logged(server, /testrun: each run's processes are every process of labgate-test-runner-sweep \(uid \d+\), killed when the run ends by a helper run as labgate-test-runner-sweep/)));
  for (const escape of ESCAPES) test(`${escape[0]} is gone when the run ends`, () => escapeRun(server, [escape], `escape-${ESCAPES.indexOf(escape)}.yml`));
  test("a watcher that run 1 left cannot rewrite or copy run 2's files", () => watcherRun(server));
});

describe("a run's processes end with it on a server with a delegated cgroup (the systemd unit with Delegate=yes)", { skip: !isRoot && "needs root to create the users" }, () => {
  const server = spawnedServer("labgate-test-runner-cgroup", "delegated");

  test("the start log says how runs are contained; every way of escaping is gone when the run ends", async () => {
    const cgroup = server.cgroup();
    // Where this machine has no cgroup v2 that root may write, the server sweeps its user instead.
    await logged(server, cgroup ? new RegExp(`testrun: each run's processes in a cgroup v2 of their own below ${cgroup}, killed as a whole`) : /testrun: each run's processes are every process of labgate-test-runner-cgroup/);
    await escapeRun(server, ESCAPES, "escapes.yml");
  });
});

describe("a run's processes end with it on a root server whose cgroups are read-only (ProtectControlGroups=yes)", { skip: !isRoot && "needs root" }, () => {
  // A user of its own: this server kills every process of it when a run ends.
  const server = spawnedServer("labgate-test-runner-root", "root");

  test("the start log says how runs are contained; every way of escaping is gone when the run ends", async () => {
    await logged(server, /testrun: each run's processes are every process of labgate-test-runner-root \(uid \d+\), killed when the run ends by this process/);
    await escapeRun(server, ESCAPES, "escapes.yml");
  });
});

/** Whether root may make a cgroup here (else a server without run_as has nothing to hold its runs with). */
function cgroupsWritable(): boolean {
  const dir = isRoot ? ownCgroup()?.dir : undefined;
  if (!dir) return false;
  const probe = join(dir, `labgate-test-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return true;
  } catch {
    return false;
  }
}

/** A /proc file's text, or "" once the process is gone. */
function readText(path: string): string {
  try {
    return readFileSync(path, "latin1");
  } catch {
    return "";
  }
}

describe("a run that was running when its server died", { skip: !cgroupsWritable() && "needs a cgroup v2 that root may write" }, () => {
  test("what it started is killed when the server starts again, before it runs anything", async () => {
    const dataDir = tempDir();
    const mark = newMark();
    let restarted: TestServer | undefined;
    try {
      const serve = await startServe(["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], { env: { LABGATE_CONFIG: "" } });
      const server = { url: serve.url, adminToken: readFileSync(join(dataDir, "admin.token"), "utf8").trim(), request: requestAt(serve.url) } as TestServer;
      await uploadConfig(server, "crash.yml", "tests:\n  crash:\n" + step("leave", `export LABGATE_MARK=${mark}; setsid sleep 300 >/dev/null 2>&1 &`) + "  - sleep:\n      seconds: 30\n");
      await trigger(server, { config_name: "crash.yml" });
      // The detached sleep itself: the step's shell also names the mark (its command line) and may die with the server before it has started the sleep.
      const detached = () => marked(mark).filter((pid) => readText(`/proc/${pid}/cmdline`).startsWith("sleep\0"));
      await waitFor(() => detached().length > 0, 10_000, "the run's detached process");
      await serve.stop("SIGKILL");
      assert.notDeepEqual(marked(mark), [], "the server's death leaves it");
      restarted = await startTestServer({}, dataDir);
      assert.deepEqual(marked(mark), []);
    } finally {
      sweep([mark]);
      await restarted?.close();
      removeDir(dataDir);
    }
  });
});

