import { spawn } from "node:child_process";
import { constants, createWriteStream, existsSync, openSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { after, systemClock, type Clock } from "./time.ts";

/** How long a process gets between SIGTERM and SIGKILL. */
export const KILL_GRACE_MS = 5_000;
/** Output kept in memory per stream; everything can still go to `outputFile`. */
export const OUTPUT_LIMIT = 1024 * 1024;
/** Where programs started with a clean environment look for programs. */
export const SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export interface ProcessOptions {
  /** A string runs through `/bin/sh -c` (as one argument); a list is an argv, no shell. */
  command: string | string[];
  cwd: string;
  /** Extra variables on top of the base environment (`baseEnv`, else the server's). */
  env?: Record<string, string>;
  /** The environment to start from instead of the server's own (test processes: src/testrun/engine/identity.ts). */
  baseEnv?: Record<string, string>;
  /**
   * Run as this user and group instead of the server's (needs root or CAP_SETUID and CAP_SETGID;
   * see switchTo), with that group alone, no_new_privs and umask 007: what it writes, its group
   * (the server is a member) may read. Signals to its process group go through that identity too.
   */
  as?: { uid: number; gid: number };
  /** no_new_privs without `as` too (setpriv): setuid programs and file capabilities give the program nothing. */
  noNewPrivs?: boolean;
  /**
   * A cgroup v2 directory the program starts in: it moves itself there (as this process's user)
   * before it becomes the program, so that all it ever starts is inside (src/testrun/engine/containment.ts).
   */
  cgroup?: string;
  timeoutMs?: number;
  /** Whose time `timeoutMs` and the kill grace run on (a server's or agent's clock); the system's by default. */
  clock?: Clock;
  /** Abort (user abort, shutdown): the process group gets SIGTERM, then SIGKILL. */
  signal?: AbortSignal;
  /** Bytes of stdout/stderr kept in memory each. */
  outputLimit?: number;
  /** Also stream stdout and stderr (interleaved) into this file, unlimited. */
  outputFile?: string;
  /** Also keep stdout and stderr interleaved, as they came, up to this many bytes (`combined`). */
  combinedLimit?: number;
  killGraceMs?: number;
  /** An open descriptor the program gets as its fd 3 (a file the server opened and checked for it). */
  fd3?: number;
}

export interface ProcessResult {
  /** Exit status, null when killed by a signal or not started. */
  exitCode: number | null;
  /** Signal that ended it, when any. */
  exitSignal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved (only with `combinedLimit`). */
  combined?: Buffer;
  /** Either stream went over the in-memory limit (the kept part is the beginning). */
  truncated: boolean;
  timedOut: boolean;
  aborted: boolean;
  /** Why the program could not start (`<tool> not found`), when it did not. */
  startError?: string;
  durationMs: number;
  pid?: number;
}

/** The program's name for messages and device names: argv[0] or the first word of a shell command. */
export function programName(command: string | string[]): string {
  const first = Array.isArray(command) ? (command[0] ?? "") : (command.trim().split(/\s+/)[0] ?? "");
  return first.split("/").pop() || first;
}

class Capture {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  private readonly limit: number;
  constructor(limit: number) {
    this.limit = limit;
  }
  add(chunk: Buffer): void {
    if (this.size >= this.limit) {
      this.truncated = true;
      return;
    }
    const room = this.limit - this.size;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    if (part.length < chunk.length) this.truncated = true;
    this.chunks.push(part);
    this.size += part.length;
  }
  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }
  text(): string {
    return this.bytes().toString("utf8");
  }
}

/**
 * The one way labgate runs programs (test modules, metadata commands, the agent's actions and
 * install command): own process group (so a shell's children die with it), timeout and abort both
 * send SIGTERM to the group and SIGKILL after the grace period, output captured up to a limit.
 * Never throws for a failing program.
 */
export function runProcess(options: ProcessOptions): Promise<ProcessResult> {
  const started = performance.now();
  const limit = options.outputLimit ?? OUTPUT_LIMIT;
  const grace = options.killGraceMs ?? KILL_GRACE_MS;
  let [file, args] = Array.isArray(options.command) ? [options.command[0] ?? "", options.command.slice(1)] : ["/bin/sh", ["-c", options.command]];
  const result = (partial: Partial<ProcessResult>): ProcessResult => ({
    exitCode: null,
    exitSignal: null,
    stdout: "",
    stderr: "",
    truncated: false,
    timedOut: false,
    aborted: false,
    durationMs: performance.now() - started,
    ...partial,
  });
  if (!file) return Promise.resolve(result({ startError: "empty command" }));
  if (options.signal?.aborted) return Promise.resolve(result({ aborted: true, startError: "aborted" }));
  if (options.as) [file, args] = ["setpriv", [...switchTo(options.as), "/bin/sh", "-c", UMASK_THEN_EXEC, file, ...args]];
  else if (options.noNewPrivs) [file, args] = [setpriv(), ["--no-new-privs", "--", "/bin/sh", "-c", CHECK_THEN_EXEC, file, ...args]];
  const wrapped = Boolean(options.as || options.noNewPrivs);
  if (options.cgroup) [file, args] = ["/bin/sh", ["-c", CGROUP_ENTRY, join(options.cgroup, "cgroup.procs"), file, ...args]];

  return new Promise((resolve) => {
    const out = new Capture(limit);
    const err = new Capture(limit);
    const both = options.combinedLimit === undefined ? undefined : new Capture(options.combinedLimit);
    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(file, args, { cwd: options.cwd, env: { ...(options.baseEnv ?? process.env), ...options.env }, stdio: ["ignore", "pipe", "pipe", ...(options.fd3 === undefined ? [] : [options.fd3])], detached: true });
    } catch (error) {
      // Arguments spawn refuses outright (e.g. a NUL byte): nothing started.
      return resolve(result({ startError: (error as Error).message, ...(both ? { combined: Buffer.alloc(0) } : {}) }));
    }
    let sink: WriteStream | undefined;
    // Never through a symlink: the directory may be the test's own (a link to the server's files).
    if (options.outputFile) sink = openOutput(options.outputFile);
    let timedOut = false;
    let aborted = false;
    const clock = options.clock ?? systemClock;
    let cancelKill: (() => void) | undefined;
    let exited = false;

    const killGroup = (sig: NodeJS.Signals) => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, sig);
      } catch (error) {
        // Another user's processes: a server that may only switch users (no CAP_KILL) signals them as that user.
        if ((error as NodeJS.ErrnoException).code === "EPERM" && options.as) return signalAs(options.as, -child.pid, sig);
        try {
          child.kill(sig);
        } catch {
          /* already gone */
        }
      }
    };
    const stop = () => {
      killGroup("SIGTERM");
      cancelKill ??= after(clock, grace, () => {
        killGroup("SIGKILL");
        // A process that left the group (setsid) may hold the output pipes for good: they close here, so the program's end is seen.
        child.stdout?.destroy();
        child.stderr?.destroy();
      });
    };
    const cancelTimeout = options.timeoutMs ? after(clock, options.timeoutMs, () => ((timedOut = true), stop())) : undefined;
    const onAbort = () => {
      aborted = true;
      stop();
    };
    options.signal?.addEventListener("abort", onAbort, { once: true });

    child.stdout!.on("data", (chunk: Buffer) => {
      out.add(chunk);
      both?.add(chunk);
      sink?.write(chunk);
    });
    child.stderr!.on("data", (chunk: Buffer) => {
      err.add(chunk);
      both?.add(chunk);
      sink?.write(chunk);
    });

    const finish = (partial: Partial<ProcessResult>) => {
      cancelTimeout?.();
      options.signal?.removeEventListener("abort", onAbort);
      const done = () =>
        resolve(
          result({
            stdout: out.text(),
            stderr: err.text(),
            ...(both ? { combined: both.bytes() } : {}),
            truncated: out.truncated || err.truncated,
            timedOut,
            aborted,
            pid: child.pid,
            ...partial,
          }),
        );
      if (sink) sink.end(done);
      else done();
    };

    child.on("error", (error: NodeJS.ErrnoException) => {
      if (exited) return;
      exited = true;
      finish({ startError: error.code === "ENOENT" ? `${programName(options.command)} not found` : error.message });
    });
    child.on("close", (code, sig) => {
      if (exited) return;
      exited = true;
      if (wrapped && code === 127 && err.text().startsWith(NOT_FOUND)) return finish({ startError: `${programName(options.command)} not found` });
      if (options.cgroup && code === 125 && err.text().includes(NOT_CONTAINED)) return finish({ startError: NOT_CONTAINED });
      // The shell may be gone while its children still hold nothing open; make sure the group is.
      if (cancelKill) {
        cancelKill();
        killGroup("SIGKILL");
      }
      finish({ exitCode: code, exitSignal: sig });
    });
  });
}

/** What the shell behind setpriv says when the program does not exist. */
const NOT_FOUND = "labgate: program not found";
/** What the cgroup shell says when the program may not start in its cgroup (it does not start). */
const NOT_CONTAINED = "cannot start the program in its run's cgroup";

/** The shell behind setpriv becomes the program, or says NOT_FOUND (setpriv's own message would be its exit 127 alone). */
const CHECK_THEN_EXEC = `command -v -- "$0" >/dev/null || { echo "${NOT_FOUND}" >&2; exit 127; }; exec "$0" "$@"`;
/** Node's spawn sets no umask: a shell sets it, then becomes the program (or says NOT_FOUND). */
const UMASK_THEN_EXEC = `umask 007; ${CHECK_THEN_EXEC}`;
/** `sh -c CGROUP_ENTRY <cgroup.procs> program...`: the shell writes itself into the cgroup ("0" is the writer), then becomes the program. */
export const CGROUP_ENTRY = `echo 0 > "$0" || { echo "labgate: ${NOT_CONTAINED}" >&2; exit 125; }; exec "$@"`;

/**
 * setpriv's arguments (util-linux) that make the rest of its command line run as `as`: real,
 * effective and saved ids, its group and no supplementary ones (not those /etc/group gives the
 * user), no capabilities, and no_new_privs (setuid programs give it nothing). Node's own uid/gid spawn
 * options are not enough: a server that is not root but holds CAP_SETUID and CAP_SETGID as
 * ambient capabilities (the systemd unit) would pass them on, and the test could switch back to
 * the server's user.
 */
export function switchTo(as: { uid: number; gid: number }): string[] {
  return ["--reuid", String(as.uid), "--regid", String(as.gid), "--clear-groups", "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--"];
}

let setprivPath: string | undefined;
/** setpriv's path: the programs of a test without `as` look in the server's PATH, which need not hold it. */
function setpriv(): string {
  setprivPath ??= SAFE_PATH.split(":").map((dir) => `${dir}/setpriv`).find((path) => existsSync(path)) ?? "setpriv";
  return setprivPath;
}

/** Open flags of output files: created or truncated, never through a symlink. */
const WRITE_NO_FOLLOW = constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW;

/** A stream writing `path` (created or truncated, never through a symlink), or undefined when it cannot be opened. */
function openOutput(path: string): WriteStream | undefined {
  try {
    return createWriteStream("", { fd: openSync(path, WRITE_NO_FOLLOW, 0o666) });
  } catch {
    return undefined;
  }
}

/** Sends `sig` to `pid` (a process group when negative) as `as`: a `kill` run as that user. */
export function signalAs(as: { uid: number; gid: number }, pid: number, sig: NodeJS.Signals): void {
  try {
    spawn("setpriv", [...switchTo(as), "kill", "-s", sig.replace(/^SIG/, ""), "--", String(pid)], { stdio: "ignore", env: { PATH: SAFE_PATH } }).on("error", () => {});
  } catch {
    /* nothing to signal with: the timeout's SIGKILL tries again */
  }
}

/** A one-line description of how a process ended, for failure messages. */
export function describeExit(r: ProcessResult, timeoutMs?: number): string {
  if (r.startError) return r.startError;
  if (r.aborted) return "Aborted by user";
  if (r.timedOut) return `timed out after ${(timeoutMs ?? 0) / 1000} s`;
  if (r.exitSignal) return `killed by ${r.exitSignal}`;
  return `exit status ${r.exitCode}`;
}
