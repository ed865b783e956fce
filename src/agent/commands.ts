import { spawn } from "node:child_process";

export interface CommandResult {
  /** Exit code; -1 when killed (timeout) or when it could not start. */
  code: number;
  /** stdout and stderr interleaved as they came, cut at `maxOutput` bytes. */
  output: Buffer;
}

const MAX_OUTPUT = 1024 * 1024;

/**
 * Runs an argv without a shell. A timeout (seconds, 0 = none) kills the process (-1, as the
 * reference client reports it).
 */
export function runCommand(argv: string[], options: { timeout?: number; cwd?: string; signal?: AbortSignal; maxOutput?: number } = {}): Promise<CommandResult> {
  const maxOutput = options.maxOutput ?? MAX_OUTPUT;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const collect = (chunk: Buffer) => {
      if (size >= maxOutput) return;
      const piece = chunk.subarray(0, maxOutput - size);
      chunks.push(piece);
      size += piece.length;
    };
    let child;
    try {
      child = spawn(argv[0], argv.slice(1), { cwd: options.cwd, stdio: ["ignore", "pipe", "pipe"], shell: false, signal: options.signal });
    } catch (error) {
      return resolve({ code: -1, output: Buffer.from(`cannot start ${argv[0]}: ${(error as Error).message}\n`) });
    }
    let killed = false;
    const timer =
      options.timeout && options.timeout > 0
        ? setTimeout(() => {
            killed = true;
            child.kill("SIGKILL");
          }, options.timeout * 1000)
        : undefined;
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    let done = false;
    const finish = (code: number) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve({ code, output: Buffer.concat(chunks) });
    };
    child.on("error", (error) => {
      collect(Buffer.from(`${error.message}\n`));
      if (child.pid === undefined) finish(-1); // never started: no close event to wait for
    });
    child.on("close", (code) => finish(killed || code === null ? -1 : code));
  });
}
