/**
 * protoplaster's own configs for its hardware modules run unchanged (test/fixtures/protoplaster/):
 * on a fake board like its CI's test platform (vivid cameras at /dev/video0 and /dev/video2,
 * sysfs GPIO, a device at 0x1C on I2C bus 0), every config loads, and each row has the device
 * name, test name and module column protoplaster gives.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { FakeBoard } from "../helpers/fake-board.ts";
import { useTestServer } from "../helpers/server.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const FIXTURES = join(process.cwd(), "test", "fixtures", "protoplaster");
const board = new FakeBoard();
const s = useTestServer({ test_server: { compat_modules: true, ...board.config } as never }, async (server) => {
  board
    .file("dev/video0")
    .file("dev/video2")
    .file("sys/class/video4linux/video0/name", "vivid\n")
    .file("sys/class/video4linux/video2/name", "vivid\n")
    .attrs("sys/class/gpio/gpio20", { direction: "in", value: 1 })
    .file("sys/class/gpio/export")
    .file("sys/class/gpio/unexport")
    .dir("tools/i2c/0/0x1c")
    .attrs("sys/class/net/eth0", { speed: 1000, operstate: "up" })
    .attrs("sys/bus/iio/devices/iio:device0", { name: "xadc", in_voltage0_vcc_raw: 3, in_voltage0_vcc_scale: "0.8" });
  for (const video of ["video0", "video2"]) board.file(`tools/v4l2/${video}/frame`, "YUYV").file(`tools/v4l2/${video}/driver`, "vivid").file(`tools/v4l2/${video}/card`, "vivid");
  // Includes first, so each config finds them stored.
  for (const name of readdirSync(FIXTURES).filter((f) => f.endsWith(".yml")).sort((a) => (a === "board-basic.yml" ? -1 : 0))) {
    await uploadConfig(server, name, readFileSync(join(FIXTURES, name), "utf8"));
  }
});
after(() => board.remove());

/** Runs a stored fixture; its rows as `device name | test name | module | status`. */
async function rows(config: string, extra: Record<string, unknown> = {}): Promise<string[]> {
  const run = await waitRun(s, (await trigger(s, { config_name: config, ...extra })).id);
  assert.equal(run.error ?? null, null);
  return (await reportRows(s, run.id)).map((r) => [r["device name"], r["test name"], r.module, r.status].join(" | "));
}

const camera = (device: string, k: number, status = "passed") =>
  ["frame", "device_name", "driver_name"].map((c) => `${device} | ${c}[test_config${k}] | test.py::TestCamera::test_${c}[test_config${k}] | ${status}`);

test("the basic board: i2c, a GPIO write, a camera", async () => {
  assert.deepEqual(await rows("board-basic.yml", { test_suite: "local" }), [
    "/dev/i2c-0 | addresses[test_config0] | test.py::TestI2C::test_addresses[test_config0] | passed",
    "GPIO 20 write test | read_write[test_config0] | test.py::TestGPIO::test_read_write[test_config0] | passed",
    ...camera("/dev/video0", 0),
  ]);
});

test("an included config in a suite of suites: network and memtester after the basic board", async () => {
  assert.deepEqual(await rows("board-complex.yml", { test_suite: "full" }), [
    "/dev/i2c-0 | addresses[test_config0] | test.py::TestI2C::test_addresses[test_config0] | passed",
    "GPIO 20 write test | read_write[test_config0] | test.py::TestGPIO::test_read_write[test_config0] | passed",
    ...camera("/dev/video0", 0),
    "eth0 | exist[test_config0] | test.py::TestNetwork::test_exist[test_config0] | passed",
    "eth0 | speed[test_config0] | test.py::TestNetwork::test_speed[test_config0] | skipped",
    "/dev/mem | memory[test_config0] | test.py::TestDMA::test_memory[test_config0] | passed",
  ]);
});

test("adc and dac as in the extended example (whose DAC path has a typo, so it fails there too)", async () => {
  assert.deepEqual(await rows("board-extended.yml"), [
    "ADC(/sys/bus/iio/devices/iio:device0) | is_alive[test_config0] | test.py::TestADC::test_is_alive[test_config0] | passed",
    "ADC(/sys/bus/iio/devices/iio:device0) | device_name[test_config0] | test.py::TestADC::test_device_name[test_config0] | passed",
    "ADC(/sys/bus/iio/devices/iio:device0) | read_adc[test_config0] | test.py::TestADC::test_read_adc[test_config0] | passed",
    "DAC(/sys/bus/iio/device/iio:device1) | sysfs_interface[test_config0] | test.py::TestDAC::test_sysfs_interface[test_config0] | failed",
  ]);
});

test("the README's example: two cameras numbered in order, the frame saved, metadata", async () => {
  const run = await waitRun(s, (await trigger(s, { config_name: "board-readme.yml", test_suite: "full" })).id);
  const report = await reportRows(s, run.id);
  assert.deepEqual(
    report.map((r) => [r["device name"], r["test name"], r.module, r.status].join(" | ")),
    [
      "/dev/i2c-0 | addresses[test_config0] | test.py::TestI2C::test_addresses[test_config0] | failed",
      ...camera("/dev/video0", 0),
      ...camera("/dev/video2", 1),
      "/sys/class/gpio/20 | read_write[test_config0] | test.py::TestGPIO::test_read_write[test_config0] | passed",
    ],
  );
  // Only 0x1C answers on this board; the address is printed in decimal, as protoplaster does.
  assert.equal(report[0]!.message, "AssertionError: No device found at address: 60");
  assert.ok(typeof (run.metadata as Record<string, unknown>).uname === "string");
  const artifacts = await s.request(`/api/v1/test-runs/${run.id}/artifacts`, { token: s.adminToken });
  assert.ok(JSON.stringify(await artifacts.json()).includes("frame.raw"));
});

test("the metadata example: a GPIO read and an interface beside i2c and camera", async () => {
  assert.deepEqual(await rows("board-metadata.yml"), [
    "/dev/i2c-0 | addresses[test_config0] | test.py::TestI2C::test_addresses[test_config0] | passed",
    ...camera("/dev/video0", 0),
    "/sys/class/gpio/20 | read_write[test_config0] | test.py::TestGPIO::test_read_write[test_config0] | passed",
    "eth0 | exist[test_config0] | test.py::TestNetwork::test_exist[test_config0] | passed",
    "eth0 | speed[test_config0] | test.py::TestNetwork::test_speed[test_config0] | skipped",
  ]);
});

test("execution order: device names in list order across groups, as protoplaster's test-order check reads them", async () => {
  const devices = (await rows("board-order.yml")).map((r) => r.split(" | ")[0]);
  assert.deepEqual(
    devices.filter((d, i) => d !== devices[i - 1]),
    ["simple(foo)", "eth0", "simple(bar)", "eth1", "eth222", "simple(buz)", "eth333"],
  );
});
