/**
 * Signed auth requests seen within the timestamp window: each is accepted once.
 * Keyed by a digest of the signed body, not the signature text, so that re-encoding the same
 * signature (base64 padding bits) does not make a replay look new. Each entry is dropped when its timestamp leaves the window, after which the timestamp
 * check refuses the request anyway. In memory: a restart forgets, the window still bounds replay.
 */
export class ReplayGuard {
  private readonly seen = new Map<string, number>();
  private lastSweep = 0;

  /** Records `digest` until `until` (UNIX seconds); false when it was already seen. */
  accept(digest: string, until: number, now: number): boolean {
    if (now - this.lastSweep >= 30) {
      for (const [sig, expiry] of this.seen) if (expiry < now) this.seen.delete(sig);
      this.lastSweep = now;
    }
    const expiry = this.seen.get(digest);
    if (expiry !== undefined && expiry >= now) return false;
    this.seen.set(digest, until);
    return true;
  }
}
