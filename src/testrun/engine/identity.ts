/**
 * Who runs what a test config starts. Running a config is running commands on the gateway: with
 * `test_server.run_as` they run as that user (never the server's), in a clean environment, in a
 * per-run directory outside the data dir, and every file a test names (the `file` module, a
 * JUnit report) is touched as that user too (test-files.ts). Without it they run as the server's own user
 * (README: run_as). `runTestProcess` is the one way anything started for a test is spawned.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, chownSync, constants, mkdirSync } from "node:fs";
import { lstat, open, readdir, rename } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { ConfigError } from "../../util/config-error.ts";
import { runProcess, SAFE_PATH, switchTo, type ProcessOptions, type ProcessResult } from "../../util/process.ts";
import { chooseContainment, type RunContainer, type RunContainment } from "./containment.ts";

/** The user and group test processes run as (`test_server.run_as`). */
export interface TestIdentity {
  user: string;
  uid: number;
  gid: number;
}

/** One `getent` entry's fields, or undefined when there is none. */
function getent(database: "passwd" | "group", key: string): string[] | undefined {
  try {
    return execFileSync("getent", [database, key], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split("\n")[0].split(":");
  } catch {
    return undefined;
  }
}

/** The form of a run_as value: `user` or `user:group`, names or numbers. */
export const RUN_AS_FORM = /^[A-Za-z0-9_][A-Za-z0-9_.-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]*)?$/;

/** `user` or `user:group` (names or numbers) as a TestIdentity, or why not (unknown, or root). */
export function lookupRunAs(spec: string): TestIdentity | { problem: string } {
  if (!RUN_AS_FORM.test(spec)) return { problem: `expected a user name or user:group, got ${JSON.stringify(spec)}` };
  const [userName, groupName] = spec.split(":", 2);
  const user = getent("passwd", userName);
  if (!user) return { problem: `no user '${userName}' on this machine (create it: useradd --system --no-create-home --shell /usr/sbin/nologin ${userName})` };
  const uid = Number(user[2]);
  let gid = Number(user[3]);
  if (groupName) {
    const group = getent("group", groupName);
    if (!group) return { problem: `no group '${groupName}' on this machine` };
    gid = Number(group[2]);
  }
  if (uid === 0 || gid === 0) return { problem: `'${spec}' is root; name an unprivileged user (e.g. labgate-runner)` };
  return { user: user[0], uid, gid };
}

/** lookupRunAs, or a ConfigError (exit 2) naming `key`. */
export function resolveRunAs(spec: string, key = "config key test_server.run_as"): TestIdentity {
  const found = lookupRunAs(spec);
  if ("problem" in found) throw new ConfigError(`${key}: ${found.problem}`);
  return found;
}

/** Throws a ConfigError naming `key` when this process cannot start programs as `identity` (it needs root, or CAP_SETUID and CAP_SETGID). */
export function checkCanSwitch(identity: TestIdentity, key = "config key test_server.run_as"): void {
  const probe = spawnSync("setpriv", [...switchTo(identity), "true"], { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"], env: { PATH: SAFE_PATH } });
  if (probe.error || probe.status !== 0) {
    const why = (probe.error as NodeJS.ErrnoException | undefined)?.code ?? (probe.stderr.trim().split("\n")[0] || `exit ${probe.status}`);
    throw new ConfigError(`${key}: this process cannot start programs as ${identity.user} (${why}): run it as root, or with CAP_SETUID and CAP_SETGID (scripts/labgate.service)`);
  }
}

/**
 * The environment of a test process: nothing of the server's but PATH, the locale and the time
 * zone (no LABGATE_*, no secrets a service manager passed in); HOME and TMPDIR are its run's directory.
 */
export function testEnvironment(identity: TestIdentity | undefined, dir: string): Record<string, string> {
  const env: Record<string, string> = { PATH: identity ? SAFE_PATH : (process.env.PATH ?? SAFE_PATH), HOME: dir, TMPDIR: dir };
  for (const name of ["LANG", "LC_ALL", "LC_CTYPE", "TZ"]) if (process.env[name] !== undefined) env[name] = process.env[name]!;
  if (identity) env.USER = env.LOGNAME = identity.user;
  return env;
}

/**
 * The one way a program is started for a test (a module's command, a metadata command, a file
 * the `file` module reads): as `identity` when there is one, in testEnvironment, in its process
 * group (abort and timeout end the whole group), in its run's container (the run's end kills
 * everything in it: containment.ts). Modules call it through `EntryContext.exec`.
 */
export function runTestProcess(identity: TestIdentity | undefined, runDir: string, options: ProcessOptions, container?: RunContainer): Promise<ProcessResult> {
  return runProcess({ ...options, ...container?.options, baseEnv: testEnvironment(identity, runDir), ...(identity ? { as: { uid: identity.uid, gid: identity.gid } } : {}) });
}

/**
 * The per-run working directories of `run_as` runs: `<root>/<run id>`, made by the test's user
 * (so it owns them) inside a root that belongs to the server and the test's group (0730: the
 * test's user may enter and create, not list). Outside the data dir, which stays 0700: a test
 * reaches nothing of the server's. When the run ends and nothing of it runs any more (its
 * container ended), its files move into the run's artifact directory (inside the data dir, out of
 * the test's reach).
 */
export class TestWorkspace {
  readonly root: string;
  readonly identity: TestIdentity;

  private constructor(root: string, identity: TestIdentity) {
    this.root = root;
    this.identity = identity;
  }

  /** Makes the root and gives it to the identity's group; a ConfigError naming `key` when this process may not. */
  static prepare(root: string, identity: TestIdentity, key = "config key test_server.work_dir"): TestWorkspace {
    try {
      mkdirSync(root, { recursive: true, mode: 0o730 });
      chownSync(root, process.getuid?.() ?? -1, identity.gid);
      chmodSync(root, 0o730);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
      throw new ConfigError(
        `${key}: cannot prepare ${root} for ${identity.user} (${code}): this process's user must own it and be in group ${identity.gid} (SupplementaryGroups in scripts/labgate.service)`,
      );
    }
    return new TestWorkspace(root, identity);
  }

  private run(command: string[], cwd = this.root): Promise<ProcessResult> {
    return runTestProcess(this.identity, cwd, { command, cwd, timeoutMs: 60_000 });
  }

  /** Creates the run's directory as the test's user (0770: its group, the server, may read and move what it writes). */
  async open(runId: string): Promise<string> {
    const dir = join(this.root, runId);
    const r = await this.run(["mkdir", "-m", "0770", "--", dir]);
    if (r.exitCode !== 0) throw new Error(`cannot create the run's directory ${dir}: ${r.startError ?? r.stderr.trim()}`);
    return dir;
  }

  /**
   * Ends the run's directory once no process of the run is left (RunContainer.end): its entries
   * move into `artifacts` (renames: links stay links, which the artifact routes never follow) and
   * the rest is removed as the test's user.
   */
  async close(runId: string, artifacts: string): Promise<void> {
    const dir = join(this.root, runId);
    mkdirSync(artifacts, { recursive: true });
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      await rename(join(dir, name), join(artifacts, name)).catch((error: NodeJS.ErrnoException) => (error.code === "EXDEV" ? copyTree(join(dir, name), join(artifacts, name)) : undefined));
    }
    await this.run(["rm", "-rf", "--", dir]);
  }
}

/**
 * Copies regular files and directories from `from` to `to` (another file system than the work
 * dir's), never through a link: nothing of the test's user runs any more, so what lstat saw is
 * what is opened, and the files are opened with O_NOFOLLOW besides.
 */
async function copyTree(from: string, to: string): Promise<void> {
  const info = await lstat(from).catch(() => undefined);
  if (info?.isDirectory()) {
    mkdirSync(to, { recursive: true });
    for (const name of await readdir(from)) await copyTree(join(from, name), join(to, name));
  } else if (info?.isFile()) {
    const source = await open(from, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const target = await open(to, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
      try {
        await pipeline(source.createReadStream({ autoClose: false }), target.createWriteStream({ autoClose: false }));
      } finally {
        await target.close();
      }
    } finally {
      await source.close();
    }
  }
}

/** Who a process's tests run as (a user and its work dir, or nothing: the process's own user) and what holds each run's processes. */
export interface TestRunAs {
  identity?: TestIdentity;
  workspace?: TestWorkspace;
  containment?: RunContainment;
}

/**
 * run_as at start (the server's `test_server.run_as`, the agent's `tests.run_as`): checked (this
 * process can switch to it, exit 2 naming the key otherwise), the data dir closed to everyone
 * else, the work dir made, the runs' containment chosen (the caller logs its description).
 */
export function prepareRunAs(identity: TestIdentity, dataDir: string, workDir: string, keys: { runAs: string; workDir: string }): TestRunAs {
  checkCanSwitch(identity, keys.runAs);
  chmodSync(dataDir, 0o700);
  return { identity, workspace: TestWorkspace.prepare(workDir, identity, keys.workDir), containment: chooseContainment(identity) };
}

/** Tests as this process's own user: only the containment of their runs. */
export const ownUserRuns = (): TestRunAs => ({ containment: chooseContainment(undefined) });

