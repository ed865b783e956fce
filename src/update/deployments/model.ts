/*
 * The deployment model (docs/update-server.md, "Deployments"), as pure logic: device states, phase sizes, the
 * stable device order, the maintenance window and the gates that move a deployment on or pause it.
 * The service (service.ts) keeps the state; this file only decides.
 */
import { createHash } from "node:crypto";
import { DEVICE_STATES, WEEKDAYS, type Counts, type DeviceState, type MaintenanceWindow, type PhaseSpec, type Status, type Weekday } from "./schema.ts";

/** States a device leaves no more on its own (not_reached is left when the device turns up late). */
export const FINAL: ReadonlySet<DeviceState> = new Set(["installed", "failed", "already_installed", "no_package", "not_reached", "aborted"]);
/** States that count as success for a phase's gate. */
export const SUCCEEDED: ReadonlySet<DeviceState> = new Set(["installed", "already_installed"]);
/** States of a device that is on its way (offered, not finished): abort stops them, the timeout ends them. */
export const UNDERWAY: ReadonlySet<DeviceState> = new Set(["offered", "downloading", "installing"]);

/** A deployment in one of these holds its group: offers, the device index, the one-per-group rule. */
export const ACTIVE: ReadonlySet<Status> = new Set(["scheduled", "running", "paused"]);
/** A deployment that ended in one of these may be reopened by a retry of its failed devices. */
export const COMPLETED: ReadonlySet<Status> = new Set(["completed", "completed_with_failures"]);

/** How a deployment whose devices all finished ends: with failed or unreached devices, it says so. */
export const endStatus = (counts: Counts): Status => (counts.failed + counts.not_reached > 0 ? "completed_with_failures" : "completed");

/** The wait (ms) before the retry that follows the `failures`-th failed attempt: the backoff, doubling each time. */
export const retryDelay = (backoffSeconds: number, failures: number): number => backoffSeconds * 1000 * 2 ** Math.max(0, failures - 1);

/**
 * Where a device goes after its `failures`-th failed attempt (this one counted): `retrying`, offered
 * again at `retryAt` (ms) after the backoff, while it has had no more than `retries` failures; else
 * `failed` for good.
 */
export function afterFailedAttempt(failures: number, retries: number, backoffSeconds: number, now: number): { state: "retrying"; retryAt: number } | { state: "failed" } {
  return failures > retries ? { state: "failed" } : { state: "retrying", retryAt: now + retryDelay(backoffSeconds, failures) };
}

/**
 * The cumulative device count at the end of each phase, for a group of `total` devices.
 * Percents round up (5 % of 20 is 1 device), so a small group still gets a first phase.
 */
export function phaseCounts(specs: readonly PhaseSpec[], total: number): number[] {
  const counts: number[] = [];
  let previous = 0;
  for (const spec of specs) {
    const end =
      typeof spec === "number"
        ? Math.ceil((spec * total) / 100)
        : "percent" in spec
          ? Math.ceil((spec.percent * total) / 100)
          : previous + spec.devices;
    previous = Math.min(total, Math.max(previous, end));
    counts.push(previous);
  }
  return counts;
}

/** The phase of the device at `position` (0-based) given the cumulative counts. */
export const phaseOf = (counts: readonly number[], position: number): number => {
  const index = counts.findIndex((end) => position < end);
  return index < 0 ? counts.length - 1 : index;
};

/**
 * The recorded order of a deployment's devices: a hash of the deployment id and the device id,
 * so that the first phase is a spread sample of the group rather than its oldest devices, and
 * the same devices come first however often it is computed.
 */
export function stableOrder(deploymentId: number, deviceIds: readonly number[]): number[] {
  return inOrderKeyOrder(deviceIds.map((id) => orderKey(deploymentId, id)));
}

/** A device's place in stableOrder (a caller hashing thousands may do it in slices). */
export interface OrderKey {
  id: number;
  digest: Buffer;
  /** The digest's first 48 bits: numbers compare far faster than the digests, and 10,000 keys sort in ~140,000 comparisons. */
  prefix: number;
}

export function orderKey(deploymentId: number, id: number): OrderKey {
  const digest = createHash("sha256").update(`${deploymentId}:${id}`).digest();
  return { id, digest, prefix: digest.readUIntBE(0, 6) };
}

/** The ids in the digests' byte order (their hex order), then by id. */
export function inOrderKeyOrder(keys: OrderKey[]): number[] {
  keys.sort((a, b) => a.prefix - b.prefix || Buffer.compare(a.digest, b.digest) || a.id - b.id);
  return keys.map((key) => key.id);
}

// --- the maintenance window --------------------------------------------------------------

const minutesOf = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

const formatters = new Map<string, Intl.DateTimeFormat>();
/** Weekday and minute of the day at `at` in `timezone`. */
function localTime(at: number, timezone: string): { day: number; minute: number } {
  let format = formatters.get(timezone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", { timeZone: timezone, weekday: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    formatters.set(timezone, format);
  }
  const parts = format.formatToParts(new Date(at));
  const part = (type: string) => parts.find((p) => p.type === type)?.value ?? "";
  return { day: WEEKDAYS.indexOf(part("weekday").toLowerCase().slice(0, 3) as Weekday), minute: Number(part("hour")) * 60 + Number(part("minute")) };
}

/** Is the window open at `at` (ms)? No window: always. */
export function windowOpen(window: MaintenanceWindow | null, at: number): boolean {
  if (!window) return true;
  const { day, minute } = localTime(at, window.timezone);
  const from = minutesOf(window.from);
  const to = minutesOf(window.to);
  const on = (d: number) => window.days.includes(WEEKDAYS[(d + 7) % 7]);
  if (from < to) return on(day) && minute >= from && minute < to;
  // Over midnight: the evening part belongs to today, the morning part to yesterday's window.
  return (on(day) && minute >= from) || (on(day - 1) && minute < to);
}

// --- gates -------------------------------------------------------------------------------

export const emptyCounts = (): Counts => Object.fromEntries(DEVICE_STATES.map((s) => [s, 0])) as Counts;
export const sumOf = (counts: Counts, states: ReadonlySet<DeviceState>): number => [...states].reduce((n, s) => n + counts[s], 0);
export const totalOf = (counts: Counts): number => DEVICE_STATES.reduce((n, s) => n + counts[s], 0);

/** Devices started so far: offered or further (a reserved board waits, as one not offered yet). */
export const begunOf = (counts: Counts): number => totalOf(counts) - counts.waiting - counts.reserved;

/**
 * The error threshold: more than `errorPercent` of the devices started so far (offered or
 * further) failed. Null: no threshold.
 */
export function overErrorThreshold(started: Counts, errorPercent: number | null): boolean {
  if (errorPercent === null) return false;
  const begun = begunOf(started);
  return begun > 0 && (started.failed * 100) / begun > errorPercent;
}

export interface GateInput {
  phase: Counts;
  successPercent: number | null;
  /** Minutes after the phase's start before it may go on; null: none. */
  successWait: number | null;
  phaseStartedAt: number;
  now: number;
}

/**
 * What a started phase's success gate says: `go` (at least S % of its devices succeeded and the
 * wait passed), `wait` (not yet: devices are still under way or the wait runs), or `stuck` (every
 * device finished below S %, or the gate is manual: a person decides).
 */
export function gate(input: GateInput): "go" | "wait" | "stuck" {
  const total = totalOf(input.phase);
  const unfinished = total - sumOf(input.phase, FINAL);
  if (total === 0) return "go";
  if (input.successPercent === null) return unfinished > 0 ? "wait" : "stuck";
  const ok = (sumOf(input.phase, SUCCEEDED) * 100) / total >= input.successPercent;
  const waited = input.successWait === null || input.now >= input.phaseStartedAt + input.successWait * 60_000;
  if (ok) return waited ? "go" : "wait";
  return unfinished > 0 ? "wait" : "stuck";
}
