/**
 * Signatures seen within the timestamp window (section 18): a signed auth request is accepted
 * once. Each entry is dropped when its timestamp leaves the window, after which the timestamp
 * check refuses the request anyway. In memory: a restart forgets, the window still bounds replay.
 */
export class ReplayGuard {
  private readonly seen = new Map<string, number>();
  private lastSweep = 0;

  /** Records `signature` until `until` (UNIX seconds); false when it was already seen. */
  accept(signature: string, until: number, now: number): boolean {
    if (now - this.lastSweep >= 30) {
      for (const [sig, expiry] of this.seen) if (expiry < now) this.seen.delete(sig);
      this.lastSweep = now;
    }
    const expiry = this.seen.get(signature);
    if (expiry !== undefined && expiry >= now) return false;
    this.seen.set(signature, until);
    return true;
  }
}
