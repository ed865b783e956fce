/**
 * Slows password guessing at the console's login (docs/tokens-and-permissions.md) without handing anyone a way
 * to lock the owner out. Failures are counted three ways:
 *
 * - per name and client address, and per client address: after `free` failures each further
 *   attempt from there has to wait, twice as long each time (1 s, 2 s, 4 s, ... up to 15 min), 429;
 * - per name, from every address: past `free` failures a wrong password is answered only after a
 *   delay (1 s, doubling up to 15 s). A right password is answered at once: the guesser pays, not
 *   the owner.
 *
 * So a right password from an address that has not been failing is never refused. An attempt
 * counts as a failure from its start (so that guesses sent in parallel count too); a success
 * takes it back and clears the name-and-address count. Memory is bounded: at most `capacity` keys
 * per kind, the least recently failed go first, and a key forgets its failures an hour after the last one.
 */
export interface ThrottleLimits {
  /** Failures after which waiting starts. */
  free: number;
  capacity: number;
}

const MAX_DELAY_S = 15 * 60;
/** The longest a wrong password's answer is held once its name is past the global cap. */
const MAX_ANSWER_DELAY_S = 15;
const FORGET_S = 60 * 60;

interface Entry {
  failures: number;
  /** Epoch ms before which no attempt is taken. */
  until: number;
  last: number;
}

class FailureCounter {
  private readonly entries = new Map<string, Entry>();
  private readonly limits: ThrottleLimits;

  constructor(limits: ThrottleLimits) {
    this.limits = limits;
  }

  private current(key: string, now: number): Entry | undefined {
    const entry = this.entries.get(key);
    if (entry && now - entry.last > FORGET_S * 1000) {
      this.entries.delete(key);
      return undefined;
    }
    return entry;
  }

  /** Milliseconds `key` still has to wait (0: it may try now). */
  wait(key: string, now: number): number {
    return Math.max(0, (this.current(key, now)?.until ?? 0) - now);
  }

  fail(key: string, now: number): void {
    const entry = this.current(key, now) ?? { failures: 0, until: 0, last: now };
    entry.failures++;
    entry.last = now;
    entry.until = this.delayed(entry.failures, now);
    // Re-inserted, so that the map's order is least recently failed first.
    this.entries.delete(key);
    if (this.entries.size >= this.limits.capacity) this.entries.delete(this.entries.keys().next().value as string);
    this.entries.set(key, entry);
  }

  /** The wait counts from now (the end of a failed attempt, not its start). */
  restamp(key: string, now: number): void {
    const entry = this.current(key, now);
    if (!entry) return;
    entry.last = now;
    entry.until = this.delayed(entry.failures, now);
  }

  /** Takes one failure back (an attempt that succeeded). */
  forgive(key: string, now: number): void {
    const entry = this.current(key, now);
    if (!entry) return;
    entry.failures = Math.max(0, entry.failures - 1);
    entry.until = this.delayed(entry.failures, entry.last);
  }

  /** Failures of `key` past the free ones. */
  excess(key: string, now: number): number {
    return Math.max(0, (this.current(key, now)?.failures ?? 0) - this.limits.free);
  }

  private delayed(failures: number, from: number): number {
    const over = failures - this.limits.free;
    return over >= 0 ? from + Math.min(MAX_DELAY_S, 2 ** Math.min(over, 20)) * 1000 : 0;
  }

  clear(key: string): void {
    this.entries.delete(key);
  }

  get size(): number {
    return this.entries.size;
  }
}

export interface LoginLimits {
  /** Per name and client address. */
  pair: ThrottleLimits;
  /** Per client address, over every name. */
  address: ThrottleLimits;
  /** Per name, over every address: past it, wrong passwords are answered late. */
  name: ThrottleLimits;
}

export const DEFAULT_LOGIN_LIMITS: LoginLimits = {
  pair: { free: 5, capacity: 10_000 },
  address: { free: 20, capacity: 10_000 },
  name: { free: 100, capacity: 10_000 },
};

export class LoginThrottle {
  private readonly pairs: FailureCounter;
  private readonly addresses: FailureCounter;
  private readonly names: FailureCounter;
  private readonly now: () => number;

  constructor(limits: LoginLimits = DEFAULT_LOGIN_LIMITS, now: () => number = Date.now) {
    this.pairs = new FailureCounter(limits.pair);
    this.addresses = new FailureCounter(limits.address);
    this.names = new FailureCounter(limits.name);
    this.now = now;
  }

  /** Seconds to wait before `name` may try again from `address` (0: go ahead). */
  retryAfter(name: string, address: string): number {
    const now = this.now();
    return Math.ceil(Math.max(this.pairs.wait(pairKey(name, address), now), this.addresses.wait(address, now)) / 1000);
  }

  /** An attempt begins: counted as a failure until `succeeded` says otherwise. */
  attempt(name: string, address: string): void {
    const now = this.now();
    this.pairs.fail(pairKey(name, address), now);
    this.addresses.fail(address, now);
    this.names.fail(name.toLowerCase(), now);
  }

  /** The attempt failed: the wait it earned starts now. Returns how long (ms) to hold its answer. */
  failed(name: string, address: string): number {
    const now = this.now();
    this.pairs.restamp(pairKey(name, address), now);
    this.addresses.restamp(address, now);
    const excess = this.names.excess(name.toLowerCase(), now);
    return excess > 0 ? Math.min(MAX_ANSWER_DELAY_S, 2 ** Math.min(excess - 1, 10)) * 1000 : 0;
  }

  succeeded(name: string, address: string): void {
    const now = this.now();
    this.pairs.clear(pairKey(name, address));
    this.addresses.forgive(address, now);
    this.names.forgive(name.toLowerCase(), now);
  }

  /** Keys held (for the memory bound's test). */
  get size(): { pairs: number; addresses: number; names: number } {
    return { pairs: this.pairs.size, addresses: this.addresses.size, names: this.names.size };
  }
}

const pairKey = (name: string, address: string) => `${name.toLowerCase()}\n${address}`;
