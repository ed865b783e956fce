import { runProcess } from "../util/process.ts";
import type { Clock } from "../util/time.ts";

export interface CommandResult {
  /** Exit code; -1 when killed (timeout, stop) or when it could not start. */
  code: number;
  /** stdout and stderr interleaved as they came, cut at `maxOutput` bytes. */
  output: Buffer;
}

const MAX_OUTPUT = 1024 * 1024;

/**
 * Runs an argv without a shell, in its own process group (src/util/process.ts). A timeout
 * (seconds, 0 = none; on `clock`, the agent's) kills the whole group at once (-1, as the reference
 * client reports it).
 */
export async function runCommand(argv: string[], options: { timeout?: number; cwd?: string; signal?: AbortSignal; maxOutput?: number; clock?: Clock } = {}): Promise<CommandResult> {
  const result = await runProcess({
    command: argv,
    cwd: options.cwd ?? process.cwd(),
    timeoutMs: options.timeout && options.timeout > 0 ? options.timeout * 1000 : undefined,
    clock: options.clock,
    signal: options.signal,
    combinedLimit: options.maxOutput ?? MAX_OUTPUT,
    outputLimit: 0, // only the interleaved copy is kept
    killGraceMs: 0,
  });
  const output = result.combined ?? Buffer.alloc(0);
  if (result.startError && !result.aborted) return { code: -1, output: Buffer.concat([output, Buffer.from(`cannot start ${argv[0]}: ${result.startError}\n`)]) };
  return { code: result.exitCode === null || result.timedOut || result.aborted ? -1 : result.exitCode, output };
}
