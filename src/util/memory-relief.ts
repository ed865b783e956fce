/*
 * After a burst of allocation (a fan-out to thousands of devices), V8 is asked to favour memory for
 * a while, so that it gives back the heap pages the burst freed.
 *
 * Node 24's V8 keeps every heap page a collection frees in a pool, resident, until a
 * memory-reducing collection, and its memory reducer runs one only when the allocation rate is
 * low, which a server with traffic never sees: after a fan-out the RSS stayed at the heap's peak.
 * With --optimize-for-size the reducer runs its (incremental) memory-reducing collections at its
 * next check, at most 8 s later. The flag also makes V8 grow the heap less between collections,
 * which cost a fan-out two thirds more CPU (README, issue 31): so it is set only once a burst is
 * over, and cleared when the next one starts or RELIEF_MS later. Never at start: the executable's
 * code caches are made then (build/code-cache.mjs), and V8 refuses a cache made under other flags.
 */
import { setFlagsFromString } from "node:v8";

/** How long V8 favours memory after a burst: its reducer checks every 8 s, then collects twice. */
export const RELIEF_MS = 30_000;

/** Runs `fn` after `ms` unless cancelled; the system's timer does not keep the process alive. */
type Schedule = (ms: number, fn: () => void) => () => void;

const unrefTimer: Schedule = (ms, fn) => {
  const timer = setTimeout(fn, ms).unref();
  return () => clearTimeout(timer);
};

export class MemoryRelief {
  private readonly setFlags: (flags: string) => void;
  private readonly schedule: Schedule;
  private running = 0;
  /** Set while V8 favours memory: ends the window. */
  private cancel: (() => void) | undefined;

  constructor(setFlags: (flags: string) => void = setFlagsFromString, schedule: Schedule = unrefTimer) {
    this.setFlags = setFlags;
    this.schedule = schedule;
  }

  /** A burst begins: V8 back to full speed. */
  begin(): void {
    this.running += 1;
    this.release();
  }

  /** A burst ended: once none runs any more, V8 favours memory for RELIEF_MS. */
  end(): void {
    this.running -= 1;
    if (this.running > 0) return;
    if (this.cancel) this.cancel();
    else this.setFlags("--optimize-for-size");
    this.cancel = this.schedule(RELIEF_MS, () => this.release());
  }

  private release(): void {
    if (!this.cancel) return;
    this.cancel();
    this.cancel = undefined;
    this.setFlags("--no-optimize-for-size");
  }
}

/** The process's one: V8's flags are the whole process's. */
export const memoryRelief = new MemoryRelief();
