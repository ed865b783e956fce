import { spawn } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";

/** How long a process gets between SIGTERM and SIGKILL. */
export const KILL_GRACE_MS = 5_000;
/** Output kept in memory per stream; everything can still go to `outputFile`. */
export const OUTPUT_LIMIT = 1024 * 1024;

export interface ProcessOptions {
  /** A string runs through `/bin/sh -c` (as one argument); a list is an argv, no shell. */
  command: string | string[];
  cwd: string;
  /** Extra variables on top of the server's environment. */
  env?: Record<string, string>;
  timeoutMs?: number;
  /** Abort (user abort, shutdown): the process group gets SIGTERM, then SIGKILL. */
  signal?: AbortSignal;
  /** Bytes of stdout/stderr kept in memory each. */
  outputLimit?: number;
  /** Also stream stdout and stderr (interleaved) into this file, unlimited. */
  outputFile?: string;
  /** Also keep stdout and stderr interleaved, as they came, up to this many bytes (`combined`). */
  combinedLimit?: number;
  killGraceMs?: number;
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
  const [file, args] = Array.isArray(options.command) ? [options.command[0] ?? "", options.command.slice(1)] : ["/bin/sh", ["-c", options.command]];
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

  return new Promise((resolve) => {
    const out = new Capture(limit);
    const err = new Capture(limit);
    const both = options.combinedLimit === undefined ? undefined : new Capture(options.combinedLimit);
    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(file, args, { cwd: options.cwd, env: { ...process.env, ...options.env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    } catch (error) {
      // Arguments spawn refuses outright (e.g. a NUL byte): nothing started.
      return resolve(result({ startError: (error as Error).message, ...(both ? { combined: Buffer.alloc(0) } : {}) }));
    }
    let sink: WriteStream | undefined;
    if (options.outputFile) sink = createWriteStream(options.outputFile);
    let timedOut = false;
    let aborted = false;
    let killTimer: NodeJS.Timeout | undefined;
    let exited = false;

    const killGroup = (sig: NodeJS.Signals) => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, sig);
      } catch {
        try {
          child.kill(sig);
        } catch {
          /* already gone */
        }
      }
    };
    const stop = () => {
      killGroup("SIGTERM");
      killTimer ??= setTimeout(() => killGroup("SIGKILL"), grace);
    };
    const timeout = options.timeoutMs ? setTimeout(() => ((timedOut = true), stop()), options.timeoutMs) : undefined;
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
      if (timeout) clearTimeout(timeout);
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
      // The shell may be gone while its children still hold nothing open; make sure the group is.
      if (killTimer) {
        clearTimeout(killTimer);
        killGroup("SIGKILL");
      }
      finish({ exitCode: code, exitSignal: sig });
    });
  });
}

/** A one-line description of how a process ended, for failure messages. */
export function describeExit(r: ProcessResult, timeoutMs?: number): string {
  if (r.startError) return r.startError;
  if (r.aborted) return "Aborted by user";
  if (r.timedOut) return `timed out after ${(timeoutMs ?? 0) / 1000} s`;
  if (r.exitSignal) return `killed by ${r.exitSignal}`;
  return `exit status ${r.exitCode}`;
}
