import assert from "node:assert/strict";
import { test } from "node:test";
import { MemoryRelief, RELIEF_MS } from "../../src/util/memory-relief.ts";

/** A relief whose V8 flags and timers are recorded: `fire()` ends the pending window. */
function recorded() {
  const flags: string[] = [];
  const pending: Array<{ ms: number; fn: () => void; cancelled: boolean }> = [];
  const relief = new MemoryRelief(
    (f) => flags.push(f),
    (ms, fn) => {
      const timer = { ms, fn, cancelled: false };
      pending.push(timer);
      return () => void (timer.cancelled = true);
    },
  );
  const fire = () => pending.filter((t) => !t.cancelled).forEach((t) => ((t.cancelled = true), t.fn()));
  return { relief, flags, pending, fire };
}

test("memory relief: V8 favours memory once a burst ended, for RELIEF_MS, never during a burst", () => {
  const { relief, flags, pending, fire } = recorded();
  relief.begin();
  assert.deepEqual(flags, [], "a burst that starts changes nothing");
  relief.end();
  assert.deepEqual(flags, ["--optimize-for-size"]);
  assert.equal(pending.at(-1)?.ms, RELIEF_MS);
  fire();
  assert.deepEqual(flags, ["--optimize-for-size", "--no-optimize-for-size"]);
});

test("memory relief: the next burst ends the window at once; overlapping bursts wait for the last", () => {
  const { relief, flags, fire } = recorded();
  relief.begin();
  relief.end();
  relief.begin();
  assert.deepEqual(flags, ["--optimize-for-size", "--no-optimize-for-size"], "full speed for the next burst");
  relief.begin();
  relief.end();
  assert.equal(flags.length, 2, "one of two bursts still runs");
  relief.end();
  assert.deepEqual(flags.slice(2), ["--optimize-for-size"]);
  relief.begin();
  relief.end();
  assert.deepEqual(flags.slice(2), ["--optimize-for-size", "--no-optimize-for-size", "--optimize-for-size"]);
  fire();
  assert.equal(flags.at(-1), "--no-optimize-for-size");
});
