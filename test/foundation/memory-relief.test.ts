import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { labgate, startServe } from "../helpers/cli.ts";
import { tempDir, waitFor } from "../helpers/server.ts";
import { KEPT_BYTES, MEASURED_NODE_MAJOR, MemoryRelief, QUIET, RELIEF_MS, SAMPLE_MS, START_MS, memoryRelief, reliefOff, startMemoryRelief, type Sample } from "../../src/util/memory-relief.ts";

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

test("memory relief: the end of a burst that began before the relief was started changes nothing, and the next burst is relieved", () => {
  const { relief, flags } = recorded();
  relief.end();
  assert.deepEqual(flags, []);
  relief.begin();
  relief.end();
  assert.deepEqual(flags, ["--optimize-for-size"], "no burst counted as still running");
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

test("memory relief runs only on the Node major it was measured on, and not with memory_relief: false", () => {
  assert.equal(reliefOff(true, `${MEASURED_NODE_MAJOR}.21.0`), undefined);
  assert.equal(reliefOff(false, `${MEASURED_NODE_MAJOR}.21.0`), "memory_relief: false");
  assert.match(reliefOff(true, "20.20.2") ?? "", /measured on Node 24's V8, and this is Node 20\.20\.2/);
  assert.match(reliefOff(true, "26.0.0") ?? "", /this is Node 26\.0\.0/);
});

test("memory relief started: it watches and takes the announced bursts; off: it sets and collects nothing, and says why once at debug level", () => {
  const on = recorded();
  on.samples.push(quiet(40), quiet(40));
  const stopOn = startMemoryRelief(true, { debug: () => assert.fail("nothing to say") }, `${MEASURED_NODE_MAJOR}.21.0`, () => on.relief);
  on.fire(START_MS);
  assert.equal(on.collections(), 1, "watching: the start's collection");
  memoryRelief.begin();
  memoryRelief.end();
  assert.deepEqual(on.flags, ["--optimize-for-size"], "a fan-out reaches the started relief");
  stopOn();
  on.fire();

  for (const [enabled, version, why] of [
    [false, `${MEASURED_NODE_MAJOR}.21.0`, /memory relief off: memory_relief: false/],
    [true, "20.20.2", /memory relief off: .*Node 20\.20\.2/],
  ] as const) {
    const off = recorded();
    const lines: string[] = [];
    const stop = startMemoryRelief(enabled, { debug: (line) => lines.push(line) }, version, () => off.relief);
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, why);
    assert.deepEqual(off.pending, [], "nothing scheduled: no sample, no collection");
    memoryRelief.begin();
    memoryRelief.end();
    assert.deepEqual(off.flags, [], "a fan-out sets no flag");
    assert.equal(off.collections(), 0);
    stop();
  }
  assert.deepEqual(on.flags, ["--optimize-for-size", "--no-optimize-for-size"], "stopped: later bursts reach nothing");
});

/** `serve` started with the fixture that records the V8 flags it sets, and `config` as its config file (debug logs). */
async function serveRecordingFlags(config: string) {
  const dir = tempDir();
  const flags = join(dir, "v8-flags.txt");
  writeFileSync(join(dir, "config.yaml"), `log_level: debug\n${config}`);
  const fixture = fileURLToPath(new URL("../fixtures/v8-flags.cjs", import.meta.url));
  const [node, ...bundle] = await labgate();
  const args = ["serve", "--config", join(dir, "config.yaml"), "--data-dir", join(dir, "data"), "--listen", "127.0.0.1:0"];
  const server = await startServe(args, { command: [node!, "--require", fixture, ...bundle], env: { LABGATE_V8_FLAGS: flags } });
  const set = () => (existsSync(flags) ? readFileSync(flags, "utf8").split("\n").filter(Boolean) : []);
  return { server, set };
}

/** No flag set by `serve` well after its start would have collected (START_MS), once it said the relief is off. */
async function noFlagsSet(server: Awaited<ReturnType<typeof serveRecordingFlags>>["server"], set: () => string[], why: RegExp) {
  await waitFor(() => why.test(server.stderr()), 10_000, "the line saying why the relief is off");
  await new Promise((resolve) => setTimeout(resolve, 3 * START_MS));
  assert.deepEqual(set(), []);
}

test("`serve` watches its memory where the relief was measured: once its start is over, one collection that gives memory back (V8's gc, reached through the expose-gc flag); elsewhere none", async () => {
  const { server, set } = await serveRecordingFlags("");
  try {
    const off = reliefOff(true);
    if (off === undefined) {
      await waitFor(() => set().length >= 2, 10_000, "the start's collection");
      assert.deepEqual(set(), ["--expose-gc", "--no-expose-gc"], "src/util/gc.ts reached V8's gc and set the flag back");
    } else {
      await noFlagsSet(server, set, new RegExp(`memory relief off: .*Node ${process.versions.node.replace(/\./g, "\\.")}`));
    }
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test("`serve` with memory_relief: false sets no V8 flag and makes no collection", async () => {
  const { server, set } = await serveRecordingFlags("memory_relief: false\n");
  try {
    await noFlagsSet(server, set, /memory relief off: memory_relief: false/);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
