import assert from "node:assert/strict";
import { test } from "node:test";
import { DeviceConnection, DeviceTimeoutError } from "../../src/update/channel/hub.ts";
import { after, every, isoTime, systemClock } from "../../src/util/time.ts";
import { TestClock } from "../helpers/server.ts";

// Deadlines far beyond the test's own time: they can only pass because the clock is moved.
const HOUR = 3600_000;

test("after: a deadline on the injected clock passes when the clock is moved, and not once cancelled", async () => {
  const clock = new TestClock();
  const fired: string[] = [];
  after(clock, HOUR, () => fired.push("kept"));
  const cancel = after(clock, HOUR, () => fired.push("cancelled"));
  cancel();
  clock.advance(HOUR / 2);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(fired, []);
  clock.advance(HOUR / 2);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(fired, ["kept"]);
});

test("after: on the system clock a plain timer, which fires once its time passed and not once cancelled", async () => {
  const fired: string[] = [];
  after(systemClock, 5, () => fired.push("kept"));
  const cancel = after(systemClock, 5, () => fired.push("cancelled"));
  cancel();
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.deepEqual(fired, ["kept"]);
});

test("every: rounds on the injected clock until stopped", async () => {
  const clock = new TestClock();
  let rounds = 0;
  const stop = every(clock, HOUR, () => rounds++);
  for (let i = 0; i < 3; i++) {
    await clock.sleepBegun(i);
    clock.advance(HOUR);
  }
  await clock.sleepBegun(3);
  assert.equal(rounds, 3);
  stop();
  clock.advance(HOUR);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(rounds, 3);
});

test("a device's reply deadline is on the server's clock", async () => {
  const clock = new TestClock();
  const sent: string[] = [];
  const ws = { send: (text: string) => sent.push(text), close: () => {}, raw: {} } as never;
  const conn = new DeviceConnection("aa:bb:cc:00:00:01", 1, ws, clock);
  const reply = conn.wait("action_list", 3600);
  clock.advance(HOUR);
  await assert.rejects(reply, (error: Error) => error instanceof DeviceTimeoutError && /did not answer within 3600 s/.test(error.message));
  const answered = conn.wait<string>("action_list", 3600);
  assert.equal(conn.settle("action_list", "list"), true);
  assert.equal(await answered, "list");
});

test("isoTime is toISOString (without V8's look-up of the host's time zone): padding, leap days, years 0 to 9999 and beyond, invalid times", () => {
  const edges = [0, 1, 999, 86_399_999, Date.UTC(2024, 1, 29, 23, 59, 59, 7), Date.UTC(2026, 10, 27, 11, 53, 15, 510), Date.parse("0012-03-04T05:06:07.089Z"), Date.parse("0000-01-01T00:00:00.000Z"), Date.parse("9999-12-31T23:59:59.999Z"), Date.UTC(10_000, 0, 1), -1, -62_198_755_200_001, 8.64e15, -8.64e15, Date.now()];
  // A spread over the years the program meets and beyond: the first and last milliseconds of days, random instants.
  let seed = 31;
  const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
  const spread = Array.from({ length: 5000 }, () => Math.floor((random() * 2 - 1) * 4e14));
  for (const ms of [...edges, ...spread]) {
    assert.equal(isoTime(ms), new Date(ms).toISOString(), String(ms));
    assert.equal(isoTime(new Date(ms)), new Date(ms).toISOString(), `Date ${ms}`);
  }
  for (const bad of [NaN, 8.64e15 + 1, Infinity]) assert.throws(() => isoTime(bad), RangeError, String(bad));
  assert.throws(() => isoTime(new Date("not a date")), RangeError);
  assert.match(isoTime(), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
});
