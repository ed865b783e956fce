/*
 * An idle agent's memory on a small board: a second after the agent first connects, one
 * memory-reducing collection (collectAllGarbage) drops what its start left behind (the source
 * that the executable compiled twice over, the config reader's bundle, the registration's and first
 * update check's buffers) and shrinks V8's young generation to its least. V8's own memory reducer
 * does the same, but only after several idle seconds; this gets there at once.
 */
import { collectAllGarbage } from "../util/gc.ts";

/** How long after the first connection: the first update check is usually done by then. */
const SETTLE_MS = 1000;

/** Collects once, SETTLE_MS after `connected` resolves (the agent's connectedOnce). */
export function collectAfterConnecting(connected: Promise<void>): void {
  void connected.then(() => setTimeout(collectAllGarbage, SETTLE_MS).unref());
}
