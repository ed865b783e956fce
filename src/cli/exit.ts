import { ConfigError } from "../util/config-error.ts";
import { holdEventLoop } from "../util/event-loop.ts";
import { UsageError } from "./args.ts";

/** A command's exit code: 2 for a usage or configuration error, 1 for any other error (its message on stderr). */
export async function exitCode(command: () => Promise<number>): Promise<number> {
  try {
    return await command();
  } catch (error) {
    process.stderr.write(`labgate: ${(error as Error).message}\n`);
    return error instanceof UsageError || error instanceof ConfigError ? 2 : 1;
  }
}

/**
 * Ends the process with the exit code `done` resolves to (1, with the stack, if it rejects). Until
 * then the event loop keeps turning (holdEventLoop): a command waiting on sql.js's compile would
 * otherwise have Node drain V8's whole background queue before it goes on.
 */
export function exitWith(done: Promise<number>): void {
  holdEventLoop(done).then(
    (code) => process.exit(code),
    (error) => {
      process.stderr.write(`labgate: ${(error as Error).stack ?? error}\n`);
      process.exit(1);
    },
  );
}
