/*
 * A deployment's progress over time (GET /api/v2/deployments/{id}/timeline), rebuilt from what the
 * server keeps: each device's outcomes in the update history (an installed, failed, not reached or
 * aborted attempt), the offer of its current attempt and its current state. The steps in between
 * that leave no trace (downloading, installing) show from the time the device's row last changed.
 * Pure: the route reads the rows (store.ts) and shapes the answer.
 */
import { emptyCounts } from "./model.ts";
import type { Counts, DeviceState } from "./schema.ts";

/** At most this many points; a longer deployment takes steps of several minutes. */
export const MAX_POINTS = 360;
const MINUTE = 60_000;

/** What the timeline is built from for one device (times in ms). */
export interface DeviceTrace {
  device: number;
  state: DeviceState;
  attempt: number;
  offeredAt: number | null;
  updated: number;
  /** The device's update history rows of this deployment, oldest first. */
  outcomes: ReadonlyArray<{ outcome: string; attempt: number | null; at: number }>;
}

export interface Timeline {
  /** The minutes between points. */
  step: number;
  /** Counts at the start, at each step and at `end` (the last point: now, or when it finished). */
  points: Array<{ at: number; counts: Counts }>;
}

const OUTCOME_STATE: Record<string, DeviceState> = { installed: "installed", not_reached: "not_reached", aborted: "aborted" };

/** A device's states in time order: waiting from the start, then each change the records show. */
function changesOf(trace: DeviceTrace, start: number): Array<{ at: number; state: DeviceState }> {
  const changes: Array<{ at: number; state: DeviceState }> = [{ at: start, state: "waiting" }];
  const push = (at: number, state: DeviceState) => {
    const last = changes[changes.length - 1];
    if (state !== last.state) changes.push({ at: Math.max(at, last.at), state });
  };
  const steps = trace.outcomes.map((o) => {
    // A failure an attempt after it answers was a retry on the way, not the end.
    const later = o.attempt !== null && o.attempt < trace.attempt;
    const state: DeviceState = o.outcome === "failed" ? (later || trace.state !== "failed" ? "retrying" : "failed") : (OUTCOME_STATE[o.outcome] ?? trace.state);
    return { at: o.at, state, order: 1 };
  });
  // The current attempt's offer, before what answered it.
  if (trace.offeredAt !== null && trace.offeredAt <= trace.updated && trace.state !== "waiting") steps.push({ at: trace.offeredAt, state: "offered", order: 0 });
  steps.sort((a, b) => a.at - b.at || a.order - b.order);
  for (const step of steps) push(step.at, step.state);
  push(trace.updated, trace.state);
  return changes;
}

/**
 * The counts per state at `start`, every `step` minutes after it and at `end`, with no more than
 * MAX_POINTS points (the step grows by whole minutes to fit).
 */
export function buildTimeline(traces: readonly DeviceTrace[], start: number, end: number): Timeline {
  const span = Math.max(0, end - start);
  const step = Math.max(1, Math.ceil(span / MINUTE / (MAX_POINTS - 2)));
  const times: number[] = [];
  for (let at = start; at < end; at += step * MINUTE) times.push(at);
  times.push(end);

  // One sweep over every device's changes in time order.
  const moves: Array<{ at: number; from: DeviceState; to: DeviceState }> = [];
  const counts = emptyCounts();
  for (const trace of traces) {
    const changes = changesOf(trace, start);
    counts.waiting += 1;
    for (let i = 1; i < changes.length; i++) moves.push({ at: changes[i].at, from: changes[i - 1].state, to: changes[i].state });
  }
  moves.sort((a, b) => a.at - b.at);
  const points: Timeline["points"] = [];
  let next = 0;
  for (const at of times) {
    for (; next < moves.length && moves[next].at <= at; next++) {
      counts[moves[next].from] -= 1;
      counts[moves[next].to] += 1;
    }
    points.push({ at, counts: { ...counts } });
  }
  return { step, points };
}
