/**
 * What holds a run's processes together, so that its end kills every one of them however it left
 * (a background job, setsid, nohup, a double fork, a user and pid namespace of its own) and the run
 * ends only once none is left. Chosen once (chooseContainment: the first run, recovery or
 * description asks, which the server does shortly after its start), in this order, and logged:
 *
 * - a cgroup v2 directory per run below this process's own cgroup (where this process may create
 *   one: root, or a unit with `Delegate=yes`): every program of the run starts inside it, and the
 *   run's end writes its `cgroup.kill` (the kernel kills the whole cgroup at once, forks under way
 *   included) and waits until it is empty;
 * - else, with run_as, every process of the test's user: found in /proc and sent SIGKILL (by this
 *   process where it may signal that user, else by a helper that runs as that user), until none is left;
 * - else nothing more than the process group that timeouts and aborts end.
 *
 * Never through a `kill` program: procps-ng 4 reads `kill -s KILL -- -1` as a bad option and kills nothing.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CGROUP_ENTRY, runProcess, SAFE_PATH, switchTo, type ProcessOptions } from "../../util/process.ts";

/** The user tests run as: the shape of identity.ts's TestIdentity (that module starts containments, so it is not imported here). */
interface TestIdentity {
  user: string;
  uid: number;
  gid: number;
}

/** How long a run's end waits for its last process to be gone before it fails the run. */
export const END_BOUND_MS = 10_000;
const POLL_MS = 20;

/** What every process of one run is started with, and how the run's end kills what is left. */
export interface RunContainer {
  /** Options of every program the run starts (runTestProcess). */
  readonly options: Pick<ProcessOptions, "cgroup" | "noNewPrivs">;
  /** Kills every process of the run; resolves once none is left, rejects naming them after END_BOUND_MS. */
  end(): Promise<void>;
}

/** The way this process contains its runs, once chosen. */
interface ChosenContainment {
  /** One line for the log: what holds a run's processes, what its end kills. */
  readonly description: string;
  open(runId: string): RunContainer;
  recover(runIds: string[]): void;
}

/**
 * The way this process contains its runs. The choice starts programs to probe the system, so it is
 * made when first asked for (in the background, never in a start that runs nothing yet) and once.
 */
export interface RunContainment {
  /** The log's line for the choice: what holds a run's processes, what its end kills. */
  describe(): Promise<string>;
  open(runId: string): Promise<RunContainer>;
  /**
   * At start, for the runs that were running when the last process died (outside a service
   * manager, which would have killed them): what they left is killed before any run starts here.
   */
  recover(runIds: string[]): Promise<void>;
}

/** The containment for tests run as `identity` (none: this process's own user), chosen on first use. */
export function chooseContainment(identity: TestIdentity | undefined): RunContainment {
  let chosen: Promise<ChosenContainment> | undefined;
  const choice = () => (chosen ??= probeContainment(identity));
  return {
    describe: async () => (await choice()).description,
    open: async (runId) => (await choice()).open(runId),
    recover: async (runIds) => (await choice()).recover(runIds),
  };
}

async function probeContainment(identity: TestIdentity | undefined): Promise<ChosenContainment> {
  // Test programs of the server's own user get no_new_privs through setpriv when it is here (run_as ones always do).
  const noNewPrivs = !identity && (await exitsZero("setpriv", ["--no-new-privs", "--", "true"]));
  const nnp = identity || noNewPrivs ? "" : "; setpriv is missing, so test programs may gain privileges through setuid programs";
  const base = await writableCgroup();
  if (base) return cgroupContainment(base.dir, noNewPrivs, `each run's processes in a cgroup v2 of their own below ${base.dir}, killed as a whole (cgroup.kill) when the run ends${nnp}`);
  // The server's own user is never swept: that would be the server itself and its neighbours.
  if (identity && identity.uid !== process.getuid?.()) return userContainment(identity, `each run's processes are every process of ${identity.user} (uid ${identity.uid}), killed when the run ends ${userKiller(identity)} (${base === undefined ? "no cgroup v2" : "no cgroup v2 this process may create"}; one run at a time: give run_as a user of its own)`);
  return {
    description: `a run's processes end with their process group only: what a test starts in the background and detaches may outlive its run (no cgroup v2 this process may create, and no run_as)${nnp}`,
    open: () => ({ options: { noNewPrivs }, end: async () => {} }),
    recover: () => {},
  };
}

/** Whether a probe program runs and exits 0 (started in the background: the event loop goes on). */
function exitsZero(command: string, args: string[]): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: "ignore", env: { PATH: SAFE_PATH } });
    child.once("error", () => resolve(false));
    child.once("exit", (code) => resolve(code === 0));
  });
}

function cgroupContainment(base: string, noNewPrivs: boolean, description: string): ChosenContainment {
  const prefix = (runId: string) => `labgate-run-${runId.replace(/[^A-Za-z0-9_-]/g, "_")}-`;
  return {
    description,
    open(runId) {
      const dir = join(base, `${prefix(runId)}${randomBytes(4).toString("hex")}`);
      mkdirSync(dir);
      return { options: { cgroup: dir, noNewPrivs }, end: () => until(() => cgroupEnded(dir), () => `the run's processes are still alive ${END_BOUND_MS / 1000} s after cgroup.kill: ${cgroupPids(dir).join(", ")}`) };
    },
    recover(runIds) {
      for (const name of readdirSync(base)) if (runIds.some((id) => name.startsWith(prefix(id)))) untilSync(() => cgroupEnded(join(base, name)));
    },
  };
}

/** One try at ending a run's cgroup: cgroup.kill, and once it is empty it goes; true when it is gone. */
function cgroupEnded(dir: string): boolean {
  try {
    writeFileSync(join(dir, "cgroup.kill"), "1");
    if (/^populated 1$/m.test(readFileSync(join(dir, "cgroup.events"), "utf8"))) return false;
    rmdirSync(dir);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return true;
    if ((error as NodeJS.ErrnoException).code !== "EBUSY") throw error;
    return false;
  }
}

/** `attempt` every POLL_MS until it is done; rejects with `left()` after END_BOUND_MS. */
async function until(attempt: () => boolean | Promise<boolean>, left: () => string): Promise<void> {
  const deadline = performance.now() + END_BOUND_MS;
  while (!(await attempt())) {
    if (performance.now() > deadline) throw new Error(left());
    await sleep(POLL_MS);
  }
}

/** `until` at start, before this process serves anything (what is left after the bound stays: the start goes on). */
function untilSync(attempt: () => boolean): void {
  const deadline = performance.now() + END_BOUND_MS;
  while (!attempt() && performance.now() < deadline) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, POLL_MS);
}

const cgroupPids = (dir: string): string[] => {
  try {
    return readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean);
  } catch {
    return [];
  }
};

/** Every process of the user gets SIGKILL until none is left; by a helper running as the user where this process may not signal it. */
function userContainment(identity: TestIdentity, description: string): ChosenContainment {
  /** One pass: whether none was left, and whether the helper must do what this process may not. */
  const pass = (): { gone: boolean; asUser?: string[] } => {
    const pids = processesOf(identity.uid);
    if (pids.length === 0) return { gone: true };
    const program = helper();
    return { gone: false, ...(killEach(pids) && program ? { asUser: [...program, KILL_ALL_OWN] } : {}) };
  };
  const left = () => `processes of ${identity.user} are still alive ${END_BOUND_MS / 1000} s after the run's end: ${processesOf(identity.uid).join(", ")}${maySignalOthers() || helper() ? "" : " (this process may not signal them: see the start log)"}`;
  const end = () =>
    until(async () => {
      const { gone, asUser } = pass();
      if (asUser) await runProcess({ command: asUser, as: identity, cwd: "/", baseEnv: { PATH: SAFE_PATH }, timeoutMs: END_BOUND_MS });
      return gone;
    }, left);
  const recover = () =>
    untilSync(() => {
      const { gone, asUser } = pass();
      if (asUser) spawnSync("setpriv", [...switchTo(identity), ...asUser], { stdio: "ignore", env: { PATH: SAFE_PATH }, timeout: END_BOUND_MS });
      return gone;
    });
  return { description, open: () => ({ options: {}, end }), recover };
}

/** SIGKILL to each of `pids`; true when this process may not signal some of them. */
function killEach(pids: number[]): boolean {
  let refused = false;
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EPERM") refused = true;
    }
  }
  return refused;
}

/** The helper's script: kill(-1) as the user signals every process of the user but itself, at once. */
const KILL_ALL_OWN = "process.kill(-1, 'SIGKILL')";

/** Node as a program that runs a script (not the single executable, which runs labgate alone). */
function helper(): string[] | undefined {
  const sea = process.getBuiltinModule?.("node:sea") as { isSea(): boolean } | undefined;
  return sea?.isSea() ? undefined : [process.execPath, "-e"];
}

/** How the start log names who kills the user's processes. */
function userKiller(identity: TestIdentity): string {
  if (maySignalOthers()) return "by this process";
  if (helper()) return `by a helper run as ${identity.user}`;
  return `only where this process may signal them, which it may not (no CAP_KILL, and the single executable runs no helper): delegate a cgroup to it (Delegate=yes and ProtectControlGroups=no in its unit) or such runs fail when processes are left`;
}

/** Root, or CAP_KILL in the effective set. */
function maySignalOthers(): boolean {
  if (process.getuid?.() === 0) return true;
  const eff = /^CapEff:\s*([0-9a-f]+)$/m.exec(readText("/proc/self/status") ?? "");
  return eff !== null && (BigInt(`0x${eff[1]}`) & (1n << 5n)) !== 0n;
}

/** Pids of live processes any of whose user ids (real, effective, saved, file system) is `uid`; never this process. */
export function processesOf(uid: number): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    const status = readText(`/proc/${name}/status`);
    const ids = status && /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$/m.exec(status);
    // A zombie is dead already: its parent reaps it.
    if (ids && ids.slice(1).some((id) => Number(id) === uid) && !/^State:\s+[ZX]/m.test(status)) found.push(Number(name));
  }
  return found;
}

const readText = (path: string): string | undefined => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
};

/**
 * A cgroup v2 directory (this process's own cgroup) where this process may make a child and start
 * a program in it: the directory; undefined without cgroup v2, null when it may not.
 */
async function writableCgroup(): Promise<{ dir: string } | null | undefined> {
  const own = /^0::(\/.*)$/m.exec(readText("/proc/self/cgroup") ?? "")?.[1];
  const mount = (readText("/proc/self/mountinfo") ?? "")
    .split("\n")
    .map((line) => line.split(" "))
    .find((fields) => fields[fields.indexOf("-") + 1] === "cgroup2");
  if (own === undefined || !mount) return undefined;
  const [root, point] = [unescapeMount(mount[3]), unescapeMount(mount[4])];
  if (own !== root && !own.startsWith(`${root === "/" ? "" : root}/`)) return undefined;
  const dir = resolve(point, `.${own.slice(root === "/" ? 0 : root.length)}`);
  const probe = join(dir, `labgate-probe-${process.pid}-${randomBytes(4).toString("hex")}`);
  try {
    mkdirSync(probe);
  } catch {
    return null;
  }
  try {
    if (!existsSync(join(probe, "cgroup.kill"))) return null;
    return (await exitsZero("/bin/sh", ["-c", CGROUP_ENTRY, join(probe, "cgroup.procs"), "true"])) ? { dir } : null;
  } finally {
    removeEmpty(probe);
  }
}

/** rmdir, again while the probe's process is still leaving the cgroup. */
function removeEmpty(dir: string): void {
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EBUSY") return;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
  }
}

/** mountinfo writes space, tab, newline and backslash as octal escapes. */
const unescapeMount = (field: string): string => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
