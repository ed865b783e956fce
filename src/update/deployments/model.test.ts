/* The deployment model's pure decisions (src/update/deployments/model.ts). */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ACTIVE, afterFailedAttempt, COMPLETED, emptyCounts, endStatus, FINAL, gate, overErrorThreshold, phaseCounts, phaseOf, retryDelay, stableOrder, SUCCEEDED, sumOf, totalOf, UNDERWAY, windowOpen } from "./model.ts";
import { DEVICE_STATES, type Counts } from "./schema.ts";

const counts = (values: Partial<Counts>): Counts => ({ ...emptyCounts(), ...values });

test("phase sizes: percents round up and are cumulative; device counts add; the last takes the rest", () => {
  assert.deepEqual(phaseCounts([5, 25, 100], 20), [1, 5, 20]);
  assert.deepEqual(phaseCounts([5, 25, 100], 300), [15, 75, 300]);
  assert.deepEqual(phaseCounts([{ devices: 2 }, { devices: 3 }, 100], 20), [2, 5, 20]);
  assert.deepEqual(phaseCounts([{ devices: 50 }, 100], 20), [20, 20], "never more than the group");
  assert.deepEqual(phaseCounts([{ percent: 50 }, 100], 3), [2, 3]);
  assert.deepEqual([0, 1, 4, 5, 19].map((p) => phaseOf([1, 5, 20], p)), [0, 1, 1, 2, 2]);
});

test("the recorded order is stable for a deployment and differs between deployments", () => {
  const ids = Array.from({ length: 50 }, (_, i) => i + 1);
  assert.deepEqual(stableOrder(7, ids), stableOrder(7, [...ids].reverse()));
  assert.notDeepEqual(stableOrder(7, ids), stableOrder(8, ids));
  assert.deepEqual([...stableOrder(7, ids)].sort((a, b) => a - b), ids);
});

test("the window: days of the range's start, local time, over midnight", () => {
  const window = { days: ["fri" as const], from: "22:00", to: "05:00", timezone: "UTC" };
  // 2026-11-27 is a Friday.
  assert.equal(windowOpen(window, Date.parse("2026-11-27T21:59:00Z")), false);
  assert.equal(windowOpen(window, Date.parse("2026-11-27T22:00:00Z")), true);
  assert.equal(windowOpen(window, Date.parse("2026-11-28T04:59:00Z")), true, "Saturday morning belongs to Friday's window");
  assert.equal(windowOpen(window, Date.parse("2026-11-28T05:00:00Z")), false);
  assert.equal(windowOpen(window, Date.parse("2026-11-28T23:00:00Z")), false, "not on Saturday evening");
  const warsaw = { days: ["fri" as const], from: "09:00", to: "17:00", timezone: "Europe/Warsaw" };
  assert.equal(windowOpen(warsaw, Date.parse("2026-11-27T08:30:00Z")), true, "09:30 in Warsaw (UTC+1)");
  assert.equal(windowOpen(warsaw, Date.parse("2026-11-27T16:30:00Z")), false, "17:30 in Warsaw");
  assert.equal(windowOpen(null, 0), true, "no window: always open");
});

test("the gate and the error threshold", () => {
  const base = { phaseStartedAt: 0, now: 0 };
  assert.equal(gate({ ...base, phase: counts({ installed: 9, downloading: 1 }), successPercent: 90, successWait: null }), "go");
  assert.equal(gate({ ...base, phase: counts({ installed: 8, downloading: 2 }), successPercent: 90, successWait: null }), "wait");
  assert.equal(gate({ ...base, phase: counts({ installed: 8, failed: 2 }), successPercent: 90, successWait: null }), "stuck");
  assert.equal(gate({ ...base, phase: counts({ installed: 9, already_installed: 1 }), successPercent: 100, successWait: 30 }), "wait", "the wait has not passed");
  assert.equal(gate({ phase: counts({ installed: 10 }), successPercent: 100, successWait: 30, phaseStartedAt: 0, now: 30 * 60_000 }), "go");
  assert.equal(gate({ ...base, phase: counts({ installed: 10 }), successPercent: null, successWait: null }), "stuck", "manual: a person decides");
  assert.equal(overErrorThreshold(counts({ failed: 1, installed: 3, waiting: 16 }), 25), false, "1 of 4 started is 25 %, not more");
  assert.equal(overErrorThreshold(counts({ failed: 2, installed: 2, waiting: 16 }), 25), true);
  assert.equal(overErrorThreshold(counts({ failed: 5 }), null), false, "no threshold");
});

test("retries: the backoff doubles after each failure; a deployment with failed or unreached devices ends completed_with_failures", () => {
  assert.deepEqual([1, 2, 3, 4].map((failures) => retryDelay(300, failures)), [300_000, 600_000, 1_200_000, 2_400_000]);
  assert.deepEqual([1, 2].map((failures) => retryDelay(0.1, failures)), [100, 200], "fractions of seconds (tests)");
  assert.equal(retryDelay(0, 3), 0);
  assert.equal(endStatus(counts({ installed: 5, already_installed: 2, no_package: 1 })), "completed");
  assert.equal(endStatus(counts({ installed: 5, failed: 1 })), "completed_with_failures");
  assert.equal(endStatus(counts({ installed: 5, not_reached: 1 })), "completed_with_failures");
  assert.equal(overErrorThreshold(counts({ retrying: 3, installed: 1 }), 25), false, "a device retrying has not failed (yet)");
});

test("a failed attempt: retrying after the backoff while the device has retries left, then failed for good", () => {
  const now = 1_000_000;
  assert.deepEqual(afterFailedAttempt(1, 2, 60, now), { state: "retrying", retryAt: now + 60_000 });
  assert.deepEqual(afterFailedAttempt(2, 2, 60, now), { state: "retrying", retryAt: now + 120_000 }, "the second retry waits twice as long");
  assert.deepEqual(afterFailedAttempt(3, 2, 60, now), { state: "failed" }, "two retries used: the third failure is final");
  assert.deepEqual(afterFailedAttempt(1, 0, 60, now), { state: "failed" }, "no retries: the first failure is final");
});

test("device states: every state is final, under way or waiting for its turn, and success is final", () => {
  const waitingTurn = DEVICE_STATES.filter((s) => !FINAL.has(s) && !UNDERWAY.has(s));
  assert.deepEqual(waitingTurn.sort(), ["reserved", "retrying", "waiting"], "reserved: a board someone holds waits for its release");
  assert.deepEqual([...FINAL].filter((s) => UNDERWAY.has(s)), [], "no state is both final and under way");
  assert.ok([...SUCCEEDED].every((s) => FINAL.has(s)));
  assert.deepEqual([...ACTIVE].filter((s) => COMPLETED.has(s)), [], "a deployment holding its group is not completed");
  const all = counts(Object.fromEntries(DEVICE_STATES.map((s, i) => [s, i + 1])));
  assert.equal(totalOf(all), (DEVICE_STATES.length * (DEVICE_STATES.length + 1)) / 2);
  assert.equal(sumOf(all, SUCCEEDED), all.installed + all.already_installed);
});

test("thresholds at their edges: a phase with no devices goes on; exactly S % succeeded is enough; no device started is under any error threshold", () => {
  const base = { phaseStartedAt: 0, now: 0, successWait: null };
  assert.equal(gate({ ...base, phase: emptyCounts(), successPercent: 90 }), "go", "an empty phase holds nothing up");
  assert.equal(gate({ ...base, phase: counts({ installed: 9, failed: 1 }), successPercent: 90 }), "go", "90 % of 10 is enough for S = 90");
  assert.equal(gate({ ...base, phase: counts({ installed: 9, no_package: 1 }), successPercent: 100 }), "stuck", "no_package is final, not a success");
  assert.equal(gate({ ...base, phase: counts({ installed: 1, retrying: 1 }), successPercent: 100 }), "wait", "a device retrying is not finished");
  assert.equal(overErrorThreshold(counts({ waiting: 10 }), 0), false, "nothing started, nothing over");
  assert.equal(overErrorThreshold(counts({ failed: 1, waiting: 10 }), 0), true, "E = 0: one failure is over");
  assert.equal(overErrorThreshold(counts({ failed: 1 }), 100), false, "E = 100: never over");
});
