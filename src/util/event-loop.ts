/**
 * Keeps the event loop turning while `work` is pending.
 *
 * A Node process that waits only on V8's helper threads (a WebAssembly compile, say), with no libuv
 * handle open, ends its event loop's round, and Node then drains V8's whole background queue on the
 * main thread (NodePlatform::DrainTasks) before it runs anything again: every job queued by then,
 * optimising compiles included, must finish first. A server's start met this on sql.js's compile
 * and, right after listening, on the tier-up of the database's hot functions, which held its first
 * answer tens of milliseconds later. A ref'd timer keeps the loop turning instead; every command runs
 * under one (src/cli/exit.ts).
 */
export async function holdEventLoop<T>(work: Promise<T>): Promise<T> {
  const timer = setInterval(() => {}, 2 ** 30);
  try {
    return await work;
  } finally {
    clearInterval(timer);
  }
}
