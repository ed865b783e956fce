/**
 * Preloaded into a benchmark's server (`node --import ./scripts/bench/loop-probe.ts`, with an IPC
 * channel): the event loop's holds and the process's CPU time per window the benchmark names.
 * A message `{ window: name }` ends the current window and begins `name`; the answer describes the
 * window that ended. Holds are measured by a 1 ms timer: how late each of its turns came (wall
 * time, which a loaded machine stretches by descheduling the server) and how much CPU the process
 * used since the turn before (what a loaded machine does not stretch: the work that held the loop).
 */
import { performance } from "node:perf_hooks";

/** A hold over this long is a p99 risk for an update check (its target is 25 ms). */
const LONG_MS = 5;

export interface WindowFigures {
  window: string;
  wallMs: number;
  cpuMs: number;
  /** The longest time the loop did not turn (ms, wall). */
  maxHoldMs: number;
  /** The most CPU time the process used between two turns of the timer (ms). */
  maxCpuHoldMs: number;
  /** Turns with more than LONG_MS of CPU between them, and their sum (ms). */
  longHolds: number;
  longHoldMs: number;
}

let name = "start";
let began = performance.now();
let cpu = process.cpuUsage();
let maxHold = 0;
let maxCpuHold = 0;
let longHolds = 0;
let longHoldMs = 0;
let last = performance.now();
let lastCpu = cpuMs(process.cpuUsage());

function cpuMs(usage: NodeJS.CpuUsage): number {
  return (usage.user + usage.system) / 1000;
}

setInterval(() => {
  const now = performance.now();
  const cpuNow = cpuMs(process.cpuUsage());
  const hold = now - last - 1;
  const cpuHold = cpuNow - lastCpu;
  last = now;
  lastCpu = cpuNow;
  if (hold > maxHold) maxHold = hold;
  if (cpuHold > maxCpuHold) maxCpuHold = cpuHold;
  if (cpuHold > LONG_MS) {
    longHolds += 1;
    longHoldMs += cpuHold;
  }
}, 1).unref();

process.on("message", (message: unknown) => {
  if (typeof message !== "object" || message === null || typeof (message as { window?: unknown }).window !== "string") return;
  const used = process.cpuUsage(cpu);
  const figures: WindowFigures = { window: name, wallMs: performance.now() - began, cpuMs: cpuMs(used), maxHoldMs: maxHold, maxCpuHoldMs: maxCpuHold, longHolds, longHoldMs };
  name = (message as { window: string }).window;
  began = performance.now();
  cpu = process.cpuUsage();
  maxHold = 0;
  maxCpuHold = 0;
  longHolds = 0;
  longHoldMs = 0;
  process.send?.(figures);
});
// A listener refs the channel: the server still ends as it would without the probe.
process.channel?.unref();
