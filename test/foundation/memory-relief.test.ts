import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { labgate, startServe } from "../helpers/cli.ts";
import { tempDir, waitFor } from "../helpers/server.ts";
import { KEPT_BYTES, MemoryRelief, QUIET, RELIEF_MS, SAMPLE_MS, START_MS, type Sample } from "../../src/util/memory-relief.ts";

const MiB = 1024 * 1024;

/**
 * A relief whose V8 flags, timers, samples and collections are recorded: `fire(ms)` runs the pending
 * timers of that delay, `samples` are what the next samples read (memory beyond the heap, event
 * loop busy), `collections` counts the collections asked for.
 */
function recorded() {
  const flags: string[] = [];
  let collections = 0;
  const pending: Array<{ ms: number; fn: () => void; cancelled: boolean }> = [];
  const samples: Sample[] = [];
  const relief = new MemoryRelief(
    (f) => flags.push(f),
    (ms, fn) => {
      const timer = { ms, fn, cancelled: false };
      pending.push(timer);
      return () => void (timer.cancelled = true);
    },
    () => samples.shift() ?? assert.fail("a sample nobody expected"),
    () => void (collections += 1),
  );
  const fire = (ms = RELIEF_MS) => pending.filter((t) => !t.cancelled && t.ms === ms).forEach((t) => ((t.cancelled = true), t.fn()));
  /** Checks once per sample given. */
  const check = (...given: Sample[]) => given.forEach((s) => (samples.push(s), relief.check()));
  return { relief, flags, pending, samples, fire, check, collections: () => collections };
}

const quiet = (keptMiB: number): Sample => ({ kept: keptMiB * MiB, busy: QUIET / 2 });
const busy = (keptMiB: number): Sample => ({ kept: keptMiB * MiB, busy: 1 });

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

test("memory relief: a burst nobody announced is relieved once memory beyond the heap grew by KEPT_BYTES and the event loop is quiet", () => {
  const { flags, pending, check } = recorded();
  const keptMiB = KEPT_BYTES / MiB;
  check(quiet(60), quiet(50), quiet(50 + keptMiB - 1));
  assert.deepEqual(flags, [], "grown by less than KEPT_BYTES from the least sampled (50 MiB)");
  check(busy(50 + keptMiB), busy(400));
  assert.deepEqual(flags, [], "not while requests come at full rate: the flag would cost them");
  check(quiet(400));
  assert.deepEqual(flags, ["--optimize-for-size"], "the burst is over");
  assert.equal(pending.at(-1)?.ms, RELIEF_MS);
});

test("memory relief: growth is measured from the level after the last relief, so memory that stays starts no other", () => {
  const { flags, fire, check } = recorded();
  const keptMiB = KEPT_BYTES / MiB;
  check(quiet(50), quiet(300));
  assert.deepEqual(flags, ["--optimize-for-size"]);
  check(quiet(300), quiet(290));
  assert.equal(flags.length, 1, "no sample counts while V8 favours memory");
  fire();
  assert.deepEqual(flags.slice(1), ["--no-optimize-for-size"]);
  check(quiet(200), quiet(200 + keptMiB - 1));
  assert.equal(flags.length, 2, "150 MiB stayed (native memory): measured from 200 MiB now, not from 50");
  check(quiet(200 + keptMiB));
  assert.deepEqual(flags.slice(2), ["--optimize-for-size"], "a new burst grew it again");
});

test("memory relief: no sampled relief while an announced burst runs; its own relief follows its end", () => {
  const { relief, flags, check } = recorded();
  check(quiet(50));
  relief.begin();
  check(quiet(500));
  assert.deepEqual(flags, [], "a fan-out is running");
  relief.end();
  assert.deepEqual(flags, ["--optimize-for-size"]);
});

test("memory relief: the start is a burst too: once it is over, one collection if the event loop is quiet, none with requests coming", () => {
  const quietStart = recorded();
  quietStart.samples.push(quiet(40), quiet(40));
  quietStart.relief.watch();
  assert.equal(quietStart.collections(), 0, "not while starting");
  quietStart.fire(START_MS);
  assert.equal(quietStart.collections(), 1);
  const busyStart = recorded();
  busyStart.samples.push(quiet(40), busy(40));
  busyStart.relief.watch();
  busyStart.fire(START_MS);
  assert.equal(busyStart.collections(), 0, "devices reconnecting after a restart: the samples that follow take over");
  assert.deepEqual([...quietStart.flags, ...busyStart.flags], [], "no flag at start (the code caches are made then)");
});

test("memory relief: watching takes its start for over after START_MS, then samples every SAMPLE_MS until stopped", () => {
  const { relief, flags, pending, samples, fire, collections } = recorded();
  samples.push(quiet(50));
  const stop = relief.watch();
  assert.equal(samples.length, 0, "the first sample starts the measure of the event loop's busy time");
  samples.push(quiet(50), quiet(50), quiet(500));
  fire(START_MS);
  assert.equal(collections(), 1);
  fire(SAMPLE_MS);
  assert.equal(samples.length, 1, "one sample per SAMPLE_MS");
  fire(SAMPLE_MS);
  assert.deepEqual(flags, ["--optimize-for-size"], "the second check found a burst over");
  stop();
  assert.equal(pending.filter((t) => !t.cancelled && t.ms === SAMPLE_MS).length, 0, "stopped: no sample pending");
});

test("`serve` watches its memory: once its start is over, one collection that gives memory back (V8's gc, reached through the expose-gc flag)", async () => {
  const dir = tempDir();
  const flags = join(dir, "v8-flags.txt");
  const fixture = fileURLToPath(new URL("../fixtures/v8-flags.cjs", import.meta.url));
  const [node, ...bundle] = await labgate();
  const args = ["serve", "--data-dir", join(dir, "data"), "--listen", "127.0.0.1:0"];
  const server = await startServe(args, { command: [node, "--require", fixture, ...bundle], env: { LABGATE_V8_FLAGS: flags } });
  try {
    const set = () => (existsSync(flags) ? readFileSync(flags, "utf8").split("\n").filter(Boolean) : []);
    await waitFor(() => set().length >= 2, 10_000, "the start's collection");
    assert.deepEqual(set(), ["--expose-gc", "--no-expose-gc"], "src/util/gc.ts reached V8's gc and set the flag back");
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
