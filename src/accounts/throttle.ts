/**
 * Slows password guessing at the console's login (issue 11): failures are counted per account
 * name and per client address. After `free` failures each further attempt has to wait, twice as
 * long each time (1 s, 2 s, 4 s, ... up to 15 min). An attempt counts as a failure from its start
 * (so that guesses sent in parallel count too); a success takes it back and clears the account's
 * count. Memory is bounded: at most `capacity` keys per kind, the least recently failed go first,
 * and a key forgets its failures `forget` seconds after the last one.
 */
export interface ThrottleLimits {
  /** Failures after which waiting starts. */
  free: number;
  capacity: number;
}

const MAX_DELAY_S = 15 * 60;
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

export class LoginThrottle {
  private readonly accounts: FailureCounter;
  private readonly addresses: FailureCounter;
  private readonly now: () => number;

  constructor(
    limits: { account: ThrottleLimits; address: ThrottleLimits } = { account: { free: 5, capacity: 10_000 }, address: { free: 20, capacity: 10_000 } },
    now: () => number = Date.now,
  ) {
    this.accounts = new FailureCounter(limits.account);
    this.addresses = new FailureCounter(limits.address);
    this.now = now;
  }

  /** Seconds to wait before `name` may try again from `address` (0: go ahead). */
  retryAfter(name: string, address: string): number {
    const now = this.now();
    return Math.ceil(Math.max(this.accounts.wait(name.toLowerCase(), now), this.addresses.wait(address, now)) / 1000);
  }

  /** An attempt begins: counted as a failure until `succeeded` says otherwise. */
  attempt(name: string, address: string): void {
    const now = this.now();
    this.accounts.fail(name.toLowerCase(), now);
    this.addresses.fail(address, now);
  }

  /** The attempt failed: the wait it earned starts now. */
  failed(name: string, address: string): void {
    const now = this.now();
    this.accounts.restamp(name.toLowerCase(), now);
    this.addresses.restamp(address, now);
  }

  succeeded(name: string, address: string): void {
    this.accounts.clear(name.toLowerCase());
    this.addresses.forgive(address, this.now());
  }

  /** Keys held (for the memory bound's test). */
  get size(): { accounts: number; addresses: number } {
    return { accounts: this.accounts.size, addresses: this.addresses.size };
  }
}
