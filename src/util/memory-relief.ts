/*
 * After a burst of allocation, V8 is asked to favour memory for a while, so that it gives back the
 * heap pages the burst freed. A burst is announced (a fan-out to thousands of devices: begin/end)
 * or noticed (update checks at full rate, say): the serving process samples its memory every few
 * seconds (watch). The start is a burst too: once it is over, one collection that gives memory
 * back. It runs where it was measured, Node 24's V8 (the executable's), and the config's
 * `memory_relief: false` turns it off (startMemoryRelief).
 *
 * Node 24's V8 keeps every heap page a collection frees in a pool, resident, until a
 * memory-reducing collection, and its memory reducer runs one only when the allocation rate is
 * low, which a server with traffic never sees: after a burst the RSS stayed at the heap's peak
 * (with 10,000 devices connected, a heap that V8 grows to four times its live size while requests
 * come at full rate). With --optimize-for-size the reducer runs its (incremental) memory-reducing
 * collections at its next check, at most 8 s later. The flag also makes V8 grow the heap less
 * between collections, which costs a fan-out and update checks at full rate much more CPU
 * (docs/performance.md): so it is set only once a burst is over, and cleared when
 * the next announced one starts or RELIEF_MS later. Never at start: the executable's code caches
 * are made then (build/code-cache.mjs), and V8 refuses a cache made under other flags; and while
 * it is set, V8's flag hash differs, so built-in modules first loaded then compile from source.
 */
import { performance } from "node:perf_hooks";
import { getHeapStatistics, setFlagsFromString } from "node:v8";
import { collectAllGarbage } from "./gc.ts";
import type { Logger } from "./log.ts";

/** How long V8 favours memory after a burst: its reducer checks every 8 s, then collects twice. */
export const RELIEF_MS = 30_000;
/** When a watching process takes its start for over (its first sample), and how often it samples then. */
export const START_MS = 1_000;
export const SAMPLE_MS = 5_000;
/** Memory beyond V8's heap that has grown by this much since the last relief is taken for freed heap pages V8 keeps. */
export const KEPT_BYTES = 64 * 1024 * 1024;
/** A burst is over when the event loop was busy for less than this share of a sample's time. */
export const QUIET = 0.5;

/** Runs `fn` after `ms` unless cancelled; the system's timer does not keep the process alive. */
type Schedule = (ms: number, fn: () => void) => () => void;

/**
 * One sample: the process's memory beyond V8's heap (RSS minus the heap's committed size: the
 * pages V8 keeps pooled count there, besides native memory), and the event loop's utilisation
 * since the previous sample.
 */
export interface Sample {
  kept: number;
  busy: number;
}

const unrefTimer: Schedule = (ms, fn) => {
  const timer = setTimeout(fn, ms).unref();
  return () => clearTimeout(timer);
};

function processSampler(): () => Sample {
  let last = performance.eventLoopUtilization();
  return () => {
    const now = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    return { kept: process.memoryUsage.rss() - getHeapStatistics().total_heap_size, busy };
  };
}

export class MemoryRelief {
  private readonly setFlags: (flags: string) => void;
  private readonly schedule: Schedule;
  private readonly sample: () => Sample;
  private readonly collect: () => void;
  private running = 0;
  /** Set while V8 favours memory: ends the window. */
  private cancel: (() => void) | undefined;
  /** The least memory beyond the heap sampled since the last relief (undefined: none yet). */
  private floor: number | undefined;

  constructor(
    setFlags: (flags: string) => void = setFlagsFromString,
    schedule: Schedule = unrefTimer,
    sample: () => Sample = processSampler(),
    collect: () => void = collectAllGarbage,
  ) {
    this.setFlags = setFlags;
    this.schedule = schedule;
    this.sample = sample;
    this.collect = collect;
  }

  /** An announced burst begins: V8 back to full speed. */
  begin(): void {
    this.running += 1;
    this.release();
  }

  /** An announced burst ended: once none runs any more, V8 favours memory for RELIEF_MS. */
  end(): void {
    // One that began before this relief was started is not its to end.
    if (this.running === 0) return;
    this.running -= 1;
    if (this.running === 0) this.relieve();
  }

  /**
   * Called once the server has started: samples START_MS later (started), then every SAMPLE_MS
   * (check), until the returned function is called.
   */
  watch(): () => void {
    this.sample(); // the event loop's busy time is measured from here
    const next = () => (stop = this.schedule(SAMPLE_MS, () => (this.check(), next())));
    let stop = this.schedule(START_MS, () => (this.started(), next()));
    return () => stop();
  }

  /**
   * The start is over: if the event loop is quiet, one collection that gives memory back (V8's
   * last-resort one, src/util/gc.ts: what the start's modules, the database's open and the first
   * requests left). The heap is small then, so it is short; with requests coming already (devices
   * reconnecting after a restart) there is none, and the samples that follow take over.
   */
  started(): void {
    const { busy } = this.sample();
    if (busy < QUIET && this.running === 0) this.collect();
  }

  /**
   * One sample: a burst nobody announced has left its freed pages behind when the memory beyond the
   * heap grew by KEPT_BYTES, and it is over when the event loop is quiet: then V8 favours memory.
   * While requests still come at full rate it does not (that would cost them); the growth is
   * measured from the least seen since the last relief, so memory that stays after one (native
   * memory, not pages) starts no other.
   */
  check(): void {
    const { kept, busy } = this.sample();
    if (this.running > 0 || this.cancel) return;
    this.floor = Math.min(this.floor ?? kept, kept);
    if (kept - this.floor >= KEPT_BYTES && busy < QUIET) this.relieve();
  }

  private relieve(): void {
    if (this.cancel) this.cancel();
    else this.setFlags("--optimize-for-size");
    this.cancel = this.schedule(RELIEF_MS, () => this.release());
  }

  private release(): void {
    if (!this.cancel) return;
    this.cancel();
    this.cancel = undefined;
    this.floor = undefined;
    this.setFlags("--no-optimize-for-size");
  }
}

/** The Node major whose V8 the relief was measured on: another V8 pools and gives back heap pages its own way. */
export const MEASURED_NODE_MAJOR = 24;

/** Why the relief stays off in a process of Node `nodeVersion` with `memory_relief: enabled`; undefined: it runs. */
export function reliefOff(enabled: boolean, nodeVersion: string = process.versions.node): string | undefined {
  if (!enabled) return "memory_relief: false";
  const major = Number(nodeVersion.split(".")[0]);
  if (major !== MEASURED_NODE_MAJOR) return `it was measured on Node ${MEASURED_NODE_MAJOR}'s V8, and this is Node ${nodeVersion}`;
  return undefined;
}

/** The relief startMemoryRelief started, if any: V8's flags are the whole process's, so there is one. */
let started: MemoryRelief | undefined;

/** What announces a burst (a fan-out): it reaches the process's relief once a serving process started one, else nothing. */
export const memoryRelief = {
  begin: (): void => started?.begin(),
  end: (): void => started?.end(),
};

/**
 * Called once the server has started: the relief watches the process (MemoryRelief.watch) and
 * takes the announced bursts, unless reliefOff says why not, which is logged once at debug level.
 * Returns the function that stops it.
 */
export function startMemoryRelief(
  enabled: boolean,
  log: Pick<Logger, "debug">,
  nodeVersion: string = process.versions.node,
  relief: () => MemoryRelief = () => new MemoryRelief(),
): () => void {
  const off = reliefOff(enabled, nodeVersion);
  if (off) {
    log.debug(`memory relief off: ${off}`);
    return () => {};
  }
  const running = relief();
  started = running;
  const unwatch = running.watch();
  return () => {
    unwatch();
    if (started === running) started = undefined;
  };
}
