import assert from "node:assert/strict";
import { test } from "node:test";
import { buildTimeline, MAX_POINTS, type DeviceTrace } from "../../src/update/deployments/timeline.ts";

const MINUTE = 60_000;
const trace = (t: Partial<DeviceTrace>): DeviceTrace => ({ device: 1, state: "waiting", attempt: 0, offeredAt: null, updated: 0, outcomes: [], ...t });
const at = (timeline: ReturnType<typeof buildTimeline>, i: number) => Object.fromEntries(Object.entries(timeline.points[i].counts).filter(([, n]) => n > 0));

test("a deployment's timeline: a failure a later attempt answers was a retry; offered from the current offer, the state from the last change", () => {
  const timeline = buildTimeline(
    [
      // Failed at minute 1, offered again at minute 2, installed at minute 3.
      trace({ device: 1, state: "installed", attempt: 2, offeredAt: 2 * MINUTE, updated: 3 * MINUTE, outcomes: [{ outcome: "failed", attempt: 1, at: MINUTE }, { outcome: "installed", attempt: 2, at: 3 * MINUTE }] }),
      // Offered at minute 1, downloading since minute 2 (no record of the steps in between).
      trace({ device: 2, state: "downloading", attempt: 1, offeredAt: MINUTE, updated: 2 * MINUTE }),
      // Failed for good at minute 2.
      trace({ device: 3, state: "failed", attempt: 1, offeredAt: MINUTE, updated: 2 * MINUTE, outcomes: [{ outcome: "failed", attempt: 1, at: 2 * MINUTE }] }),
      trace({ device: 4 }),
    ],
    0,
    3 * MINUTE + 1,
  );
  assert.equal(timeline.step, 1);
  assert.equal(timeline.points.length, 5);
  assert.deepEqual(at(timeline, 0), { waiting: 4 });
  assert.deepEqual(at(timeline, 1), { waiting: 1, offered: 2, retrying: 1 });
  assert.deepEqual(at(timeline, 2), { waiting: 1, offered: 1, downloading: 1, failed: 1 });
  assert.deepEqual(at(timeline, 4), { waiting: 1, downloading: 1, installed: 1, failed: 1 });
});

test("a long deployment's timeline takes longer steps: never more than MAX_POINTS points", () => {
  const week = 7 * 24 * 60 * MINUTE;
  const timeline = buildTimeline([trace({ state: "installed", updated: week / 2 })], 0, week);
  assert.ok(timeline.points.length <= MAX_POINTS, `${timeline.points.length} points`);
  assert.equal(timeline.step, Math.ceil(7 * 24 * 60 / (MAX_POINTS - 2)));
  assert.deepEqual(at(timeline, timeline.points.length - 1), { installed: 1 });
  assert.deepEqual(buildTimeline([], 5, 5).points.map((p) => p.at), [5], "one point for no time at all");
});
