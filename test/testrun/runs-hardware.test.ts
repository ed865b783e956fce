/**
 * The hardware modules (docs/modules.md) against a fake board: each test writes the sysfs, /dev
 * and firmware files it needs below the server's `sys_root`, `dev_root` and `firmware_root`, puts
 * stand-in tools on the PATH (or none), runs a config through the HTTP API and reads the report.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, beforeEach, describe, test } from "node:test";
import { FakeBoard, testCardPng } from "../helpers/fake-board.ts";
import { useTestServer } from "../helpers/server.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

type Row = Record<string, string>;
const board = new FakeBoard();
const s = useTestServer({ test_server: board.config as never });
after(() => board.remove());
beforeEach(() => board.reset());

let configs = 0;
/** Runs `yaml` to the end; its rows as [device name, test name, status, message]. */
async function run(yaml: string): Promise<{ rows: Row[]; brief: string[][]; warnings: unknown; id: string }> {
  const name = `hw${++configs}.yml`;
  await uploadConfig(s, name, yaml);
  const created = await trigger(s, { config_name: name });
  const done = await waitRun(s, created.id);
  const rows = await reportRows(s, created.id);
  return { rows, brief: rows.map((r) => [r["device name"]!, r["test name"]!, r.status!, r.message!]), warnings: done.warnings, id: created.id };
}

const refused = async (yaml: string) => {
  const name = `bad${++configs}.yml`;
  await uploadConfig(s, name, yaml);
  const res = await s.request("/api/v1/test-runs", { method: "POST", json: { config_name: name }, token: s.adminToken });
  assert.equal(res.status, 422);
  return ((await res.json()) as { error: string }).error;
};

const log = (name: string) => (existsSync(join(board.root, "tools", name)) ? readFileSync(join(board.root, "tools", name), "utf8") : "");

describe("network", () => {
  test("an interface that is up at the wanted speed passes; rows and names as protoplaster's", async () => {
    board.attrs("sys/class/net/eth0", { speed: 1000, operstate: "up", carrier: 1, mtu: 1500, address: "02:00:00:aa:bb:cc" });
    const { rows } = await run(`tests:\n  net:\n  - network:\n      interface: eth0\n      speed: 1000\n      state: up\n      carrier: true\n      mtu: 1500\n      mac: 02:00:00:AA:BB:CC\n`);
    assert.deepEqual(
      rows.map((r) => [r["device name"], r["test name"], r.module, r.status]),
      [
        ["eth0", "exist[test_config0]", "test.py::TestNetwork::test_exist[test_config0]", "passed"],
        ["eth0", "speed[test_config0]", "test.py::TestNetwork::test_speed[test_config0]", "passed"],
        ["eth0", "state[test_config0]", "test.py::TestNetwork::test_state[test_config0]", "passed"],
        ["eth0", "carrier[test_config0]", "test.py::TestNetwork::test_carrier[test_config0]", "passed"],
        ["eth0", "mtu[test_config0]", "test.py::TestNetwork::test_mtu[test_config0]", "passed"],
        ["eth0", "mac[test_config0]", "test.py::TestNetwork::test_mac[test_config0]", "passed"],
      ],
    );
  });

  test("a slow link, a down link, a missing interface and no speed to check", async () => {
    board.attrs("sys/class/net/eth0", { speed: 100, operstate: "down", carrier: 0 });
    // A link that is down has no readable speed (the kernel answers EINVAL): here the file is missing.
    board.attrs("sys/class/net/eth1", { operstate: "down" });
    const { brief } = await run(
      `tests:\n  net:\n  - network: {interface: eth0, speed: 1000, state: up, carrier: true}\n  - network: {interface: eth1, speed: 1000}\n  - network: {interface: wlan9}\n`,
    );
    assert.deepEqual(brief, [
      ["eth0", "exist[test_config0]", "passed", ""],
      ["eth0", "speed[test_config0]", "failed", "AssertionError: Expected speed 1000, but got 100"],
      ["eth0", "state[test_config0]", "failed", "operstate is down, expected up"],
      ["eth0", "carrier[test_config0]", "failed", "no carrier (is the cable plugged in?)"],
      ["eth1", "exist[test_config1]", "passed", ""],
      ["eth1", "speed[test_config1]", "failed", "AssertionError: Could not read speed for eth1 (is link down?)"],
      ["wlan9", "exist[test_config2]", "failed", "AssertionError: No interface found: wlan9"],
      ["wlan9", "speed[test_config2]", "skipped", "Skipped: speed parameter not set"],
    ]);
  });

  test("an interface name cannot leave /sys/class/net", async () => {
    assert.match(await refused(`tests:\n  net:\n  - network: {interface: ../../etc}\n`), /parameter 'interface': expected an interface name/);
  });
});

describe("usbdev", () => {
  test("by sysfs name and by vendor:product; speed and ids", async () => {
    board.attrs("sys/bus/usb/devices/1-1.2", { speed: 480, idVendor: "0bda", idProduct: "5411" });
    board.attrs("sys/bus/usb/devices/2-1", { speed: 5000, idVendor: "1d6b", idProduct: "0003" });
    const { brief } = await run(
      `tests:\n  usb:\n  - usbdev: {device: 1-1.2, speed: 480, vendor_id: 0bda, product_id: "5411"}\n  - usbdev: {device: "1d6b:0003", speed: 480}\n  - usbdev: {device: 3-4}\n`,
    );
    assert.deepEqual(brief, [
      ["usb(1-1.2)", "sysfs_interface[test_config0]", "passed", ""],
      ["usb(1-1.2)", "negotiated_speed[test_config0]", "passed", ""],
      ["usb(1-1.2)", "ids[test_config0]", "passed", ""],
      ["usb(1d6b:0003)", "sysfs_interface[test_config1]", "passed", ""],
      ["usb(1d6b:0003)", "negotiated_speed[test_config1]", "failed", "AssertionError: Expected USB speed 480 Mbps, but got 5000 Mbps"],
      ["usb(3-4)", "sysfs_interface[test_config2]", "failed", "AssertionError: USB interface /sys/bus/usb/devices/3-4 doesn't exist"],
      ["usb(3-4)", "negotiated_speed[test_config2]", "skipped", "Skipped: speed parameter not set"],
    ]);
  });

  test("an absent vendor:product and a wrong vendor", async () => {
    board.attrs("sys/bus/usb/devices/1-1", { speed: 12, idVendor: "046d", idProduct: "c52b" });
    const { brief } = await run(`tests:\n  usb:\n  - usbdev: {device: "dead:beef", speed: 12}\n  - usbdev: {device: 1-1, vendor_id: "0x1234"}\n`);
    assert.deepEqual(brief, [
      ["usb(dead:beef)", "sysfs_interface[test_config0]", "failed", "AssertionError: No USB device with ID dead:beef in /sys/bus/usb/devices"],
      ["usb(dead:beef)", "negotiated_speed[test_config0]", "failed", "AssertionError: Could not find speed file: /sys/bus/usb/devices/dead:beef/speed (is the device connected?)"],
      ["usb(1-1)", "sysfs_interface[test_config1]", "passed", ""],
      ["usb(1-1)", "negotiated_speed[test_config1]", "skipped", "Skipped: speed parameter not set"],
      ["usb(1-1)", "ids[test_config1]", "failed", "idVendor is 046d, expected 1234"],
    ]);
  });
});

describe("adc and dac", () => {
  const iio = "sys/bus/iio/devices";
  test("a channel within its bounds, above, below, and a missing device", async () => {
    board.attrs(`${iio}/iio:device0`, { name: "xadc", in_voltage0_vcc_raw: 2730, in_voltage0_vcc_scale: "0.732421875", in_voltage1_raw: 100, in_voltage1_scale: 1 });
    const { brief } = await run(
      [
        "tests:",
        "  adc:",
        '  - adc: {sysfs_path: "/sys/bus/iio/devices/iio:device0", channel: 0_vcc, device_name: xadc, min_voltage: 1900, max_voltage: 2100}',
        '  - adc: {sysfs_path: "/sys/bus/iio/devices/iio:device0", channel: 0_vcc, device_name: other, max_voltage: 1000}',
        "  - adc: {channel: 1, min_voltage: 3300}",
        '  - adc: {sysfs_path: "/sys/bus/iio/devices/iio:device7", channel: 0}',
        "",
      ].join("\n"),
    );
    const adc = "ADC(/sys/bus/iio/devices/iio:device0)";
    assert.deepEqual(brief, [
      [adc, "is_alive[test_config0]", "passed", ""],
      [adc, "device_name[test_config0]", "passed", ""],
      [adc, "read_adc[test_config0]", "passed", ""],
      [adc, "is_alive[test_config1]", "passed", ""],
      [adc, "device_name[test_config1]", "failed", "AssertionError: The device name is not correct"],
      [adc, "read_adc[test_config1]", "failed", "AssertionError: The voltage is above the maximum allowed value."],
      [adc, "is_alive[test_config2]", "passed", ""],
      [adc, "device_name[test_config2]", "skipped", "Skipped: device_name parameter not set"],
      [adc, "read_adc[test_config2]", "failed", "AssertionError: The voltage is below the minimum allowed value."],
      ["ADC(/sys/bus/iio/devices/iio:device7)", "is_alive[test_config3]", "failed", "AssertionError: ADC does not respond correctly"],
      ["ADC(/sys/bus/iio/devices/iio:device7)", "device_name[test_config3]", "skipped", "Skipped: device_name parameter not set"],
      ["ADC(/sys/bus/iio/devices/iio:device7)", "read_adc[test_config3]", "failed", "cannot read /sys/bus/iio/devices/iio:device7/in_voltage0_raw"],
    ]);
  });

  test("a DAC path, a written value read back, a missing DAC", async () => {
    board.attrs(`${iio}/iio:device1`, { name: "ltc2655", out_voltage0_raw: 0 });
    const { brief } = await run(
      `tests:\n  dac:\n  - dac: {sysfs_path: "/sys/bus/iio/devices/iio:device1", channel: 0, value: 2048}\n  - dac: {sysfs_path: "/sys/bus/iio/device/iio:device1"}\n`,
    );
    assert.deepEqual(brief, [
      ["DAC(/sys/bus/iio/devices/iio:device1)", "sysfs_interface[test_config0]", "passed", ""],
      ["DAC(/sys/bus/iio/devices/iio:device1)", "write_read[test_config0]", "passed", ""],
      ["DAC(/sys/bus/iio/device/iio:device1)", "sysfs_interface[test_config1]", "failed", "AssertionError: Provided DAC path doesn't exist"],
    ]);
    assert.equal(readFileSync(join(board.sys, "bus/iio/devices/iio:device1/out_voltage0_raw"), "utf8"), "2048");
  });
});

describe("thermal", () => {
  test("a thermal zone by path and by type, an hwmon sensor; too hot, missing", async () => {
    board.attrs("sys/class/thermal/thermal_zone0", { type: "cpu-thermal", temp: 48312 });
    board.attrs("sys/class/thermal/thermal_zone1", { type: "gpu-thermal", temp: 91000 });
    board.attrs("sys/class/hwmon/hwmon2", { name: "tmp431", temp2_input: 30500 });
    const { brief } = await run(
      [
        "tests:",
        "  temps:",
        "  - thermal: {path: /sys/class/thermal/thermal_zone0/temp, min: 0, max: 85}",
        "  - thermal: {zone: gpu-thermal, max: 85, name: GPU}",
        "  - thermal: {hwmon: tmp431, sensor: temp2, min: 20, max: 40}",
        "  - thermal: {hwmon: lm75, max: 40}",
        "",
      ].join("\n"),
    );
    assert.deepEqual(brief, [
      ["/sys/class/thermal/thermal_zone0/temp", "range[test_config0]", "passed", ""],
      ["GPU", "range[test_config1]", "failed", "91 is above the maximum 85"],
      ["hwmon tmp431 temp2", "range[test_config2]", "passed", ""],
      ["hwmon lm75 temp1", "range[test_config3]", "failed", "no hwmon lm75 temp1"],
    ]);
    assert.match(await refused(`tests:\n  t:\n  - thermal: {max: 3}\n`), /exactly one of 'path', 'zone' and 'hwmon'/);
  });
});

describe("mmc and block", () => {
  test("present, size, type and read speed of the first MiB; a small card, a missing one", async () => {
    board.attrs("sys/block/mmcblk0", { size: 62333952 }).attrs("sys/block/mmcblk0/device", { type: "SD" });
    board.file("dev/mmcblk0", Buffer.alloc(2 * 1024 * 1024, 0x5a));
    const { brief } = await run(
      [
        "tests:",
        "  storage:",
        "  - mmc: {device: mmcblk0, min_size: 29G, max_size: 32G, type: SD, read_mib: 2, min_read_mbps: 1}",
        "  - mmc: {device: /dev/mmcblk0, min_size: 64G, type: MMC}",
        "  - mmc: {device: mmcblk1, read_mib: 1, min_read_mbps: 1}",
        "  - block: {device: sda}",
        "",
      ].join("\n"),
    );
    assert.deepEqual(brief, [
      ["/dev/mmcblk0", "exists[test_config0]", "passed", ""],
      ["/dev/mmcblk0", "size[test_config0]", "passed", ""],
      ["/dev/mmcblk0", "type[test_config0]", "passed", ""],
      ["/dev/mmcblk0", "read_speed[test_config0]", "passed", ""],
      ["/dev/mmcblk0", "exists[test_config1]", "passed", ""],
      ["/dev/mmcblk0", "size[test_config1]", "failed", "size 29.72 GiB (31914983424 bytes) is less than 64G"],
      ["/dev/mmcblk0", "type[test_config1]", "failed", "device type is SD, expected MMC"],
      ["/dev/mmcblk1", "exists[test_config2]", "failed", "no block device /sys/block/mmcblk1"],
      ["/dev/mmcblk1", "read_speed[test_config2]", "failed", "cannot read /dev/mmcblk1: no such device"],
      ["/dev/sda", "exists[test_config0]", "failed", "no block device /sys/block/sda"],
    ]);
  });
});

describe("gpio", () => {
  test("sysfs: a line reads its value, a write reads back, a mismatch; export when the directory is missing", async () => {
    board.attrs("sys/class/gpio/gpio20", { direction: "in", value: 0 });
    board.attrs("sys/class/gpio/gpio17", { direction: "in", value: 1 });
    board.file("sys/class/gpio/export").file("sys/class/gpio/unexport");
    const { brief } = await run(
      [
        "tests:",
        "  pins:",
        "  - gpio: {test_name: GPIO 20 write test, number: 20, value: 1, write: true}",
        "  - gpio: {number: 17, value: 1}",
        "  - gpio: {number: 17, value: 0}",
        "  - gpio: {number: 5, value: 1}",
        "",
      ].join("\n"),
    );
    assert.deepEqual(brief, [
      ["GPIO 20 write test", "read_write[test_config0]", "passed", ""],
      ["/sys/class/gpio/17", "read_write[test_config1]", "passed", ""],
      ["/sys/class/gpio/17", "read_write[test_config2]", "failed", "AssertionError: Read value mismatch. Expected: 0, Actual: 1"],
      // The fake kernel makes no directory on export: the reference's message, and the line is unexported again.
      ["/sys/class/gpio/5", "read_write[test_config3]", "failed", "AssertionError: GPIO could not be initiated"],
    ]);
    assert.equal(readFileSync(join(board.sys, "class/gpio/gpio20/direction"), "utf8"), "out");
    assert.equal(readFileSync(join(board.sys, "class/gpio/export"), "utf8"), "5");
    assert.equal(readFileSync(join(board.sys, "class/gpio/unexport"), "utf8"), "5");
  });

  test("no sysfs interface", async () => {
    const { brief } = await run(`tests:\n  pins:\n  - gpio: {number: 20, value: 1}\n`);
    assert.deepEqual(brief, [["/sys/class/gpio/20", "read_write[test_config0]", "failed", "AssertionError: Sysfs interface for GPIO does not exist"]]);
  });

  test("character device through libgpiod 1 and 2 tools, given the chip's /dev path", async () => {
    board.file("dev/gpiochip0").file("tools/gpio/gpiochip0/17", "1\n").file("tools/gpio/gpiochip0/18", "0\n");
    const yaml = `tests:\n  pins:\n  - gpio: {chip: 0, line: 17, value: 1}\n  - gpio: {chip: gpiochip0, line: 18, value: 1}\n  - gpio: {chip: /dev/gpiochip0, line: 22, value: 1, write: true}\n`;
    const v1 = await run(yaml);
    assert.deepEqual(v1.brief, [
      ["gpiochip0/17", "read_write[test_config0]", "passed", ""],
      ["gpiochip0/18", "read_write[test_config1]", "failed", "AssertionError: Read value mismatch. Expected: 1, Actual: 0"],
      ["gpiochip0/22", "read_write[test_config2]", "passed", ""],
    ]);
    assert.match(log("gpio.log"), new RegExp(`^gpioset ${board.dev}/gpiochip0 22=1$`, "m"));

    board.file("tools/gpiod-version", "2.1.3\n").file("tools/gpio-stuck").file("tools/gpio/gpiochip0/22", "0\n");
    const v2 = await run(yaml);
    assert.equal(v2.brief[0]![2], "passed");
    assert.deepEqual(v2.brief[2], ["gpiochip0/22", "read_write[test_config2]", "failed", "AssertionError: Incorrect value read back after write. Expected: 1, Actual: 0"]);
    assert.match(log("gpio.log"), new RegExp(`^gpioset -t0 -c ${board.dev}/gpiochip0 22=1$`, "m"));
    assert.match(log("gpio.log"), new RegExp(`^gpioget --numeric --as-is -c ${board.dev}/gpiochip0 22$`, "m"));
  });

  test("a line is a name or an offset, never an option of the tool", async () => {
    assert.match(await refused(`tests:\n  p:\n  - gpio: {chip: 0, line: --help, value: 1}\n`), /parameter 'line': expected a line offset or name/);
  });

  test("without libgpiod's tools the case fails naming the package", async () => {
    board.file("dev/gpiochip0");
    board.tools(false);
    const { brief } = await run(`tests:\n  pins:\n  - gpio: {chip: 0, line: 17, value: 1}\n`);
    assert.deepEqual(brief, [["gpiochip0/17", "read_write[test_config0]", "failed", "gpioget not found: install the Debian package gpiod"]]);
  });
});

describe("i2c and i2c_registers", () => {
  const basic = `tests:\n  simple_test:\n  - i2c:\n      bus: 0\n      devices:\n      - name: "Sensor name"\n        address: 0x1C\n      - name: mux\n        address: 0x70\n`;

  test("every address answers i2cget; a missing one is named in decimal as the reference does", async () => {
    board.dir("tools/i2c/0/0x1c").dir("tools/i2c/0/0x70");
    assert.deepEqual((await run(basic)).brief, [["/dev/i2c-0", "addresses[test_config0]", "passed", ""]]);
    board.reset();
    board.dir("tools/i2c/0/0x1c");
    assert.deepEqual((await run(basic)).brief, [["/dev/i2c-0", "addresses[test_config0]", "failed", "AssertionError: No device found at address: 112"]]);
    // A bus that does not open is not a missing device.
    assert.deepEqual((await run(basic.replace("bus: 0", "bus: 4"))).brief, [["/dev/i2c-4", "addresses[test_config0]", "failed", "Error: Could not open file `/dev/i2c-4' or `/dev/i2c/4': No such file or directory"]]);
  });

  test("without i2c-tools: a bound kernel driver counts, else the package to install", async () => {
    board.tools(false);
    board.dir("sys/bus/i2c/devices/0-001c/driver").dir("sys/bus/i2c/devices/0-0070/driver");
    assert.deepEqual((await run(basic)).brief, [["/dev/i2c-0", "addresses[test_config0]", "passed", ""]]);
    board.reset();
    board.tools(false);
    board.dir("sys/bus/i2c/devices/0-001c/driver").dir("sys/bus/i2c/devices/0-0070");
    assert.deepEqual((await run(basic)).brief, [
      ["/dev/i2c-0", "addresses[test_config0]", "failed", "AssertionError: No device found at address: 112 (i2cget not found: install the Debian package i2c-tools; no driver bound at /sys/bus/i2c/devices/0-0070)"],
    ]);
    board.tools(false);
    const probe = await run(`tests:\n  b:\n  - i2c: {bus: /dev/i2c-3, method: probe, devices: [{name: x, address: 0x10}]}\n`);
    assert.deepEqual(probe.brief, [["/dev/i2c-3", "addresses[test_config0]", "failed", "i2cget not found: install the Debian package i2c-tools"]]);
  });

  test("chip registers under a mask, one row per register; a wrong ID, a silent chip, no tool", async () => {
    board.file("tools/i2c/1/0x21/0x01", "0x10\n").file("tools/i2c/1/0x21/0x02", "0x2f\n").file("tools/i2c/1/0x4c/0xfe", "0x55\n");
    const yaml = [
      "tests:",
      "  chips:",
      "  - i2c_registers:",
      "      bus: 1",
      "      address: 0x21",
      "      name: DA9062 PMIC",
      "      registers:",
      "      - {name: variant_id, register: 0x01, value: 0x10}",
      "      - {name: customer_id, register: 0x02, value: 0x20, mask: 0xf0}",
      "      - {register: 0x03, value: 0x30}",
      "  - i2c_registers:",
      "      bus: /dev/i2c-1",
      "      address: 0x4c",
      "      registers: [{name: manufacturer_id, register: 0xfe, value: 0x41}]",
      "  - i2c_registers: {bus: 1, address: 0x22, registers: [{register: 0, value: 0}]}",
      "",
    ].join("\n");
    assert.deepEqual((await run(yaml)).brief, [
      ["DA9062 PMIC", "variant_id[test_config0]", "passed", ""],
      ["DA9062 PMIC", "customer_id[test_config0]", "passed", ""],
      ["DA9062 PMIC", "register_0x03[test_config0]", "failed", "register 0x03: i2cget exited with status 2: Error: Read failed"],
      ["i2c(1, 0x4c)", "manufacturer_id[test_config1]", "failed", "register 0xfe reads 0x55, expected 0x41"],
      ["i2c(1, 0x22)", "register_0x00[test_config2]", "failed", "register 0x00: i2cget exited with status 2: Error: Read failed"],
    ]);
    board.tools(false);
    assert.deepEqual((await run(`tests:\n  c:\n  - i2c_registers: {bus: 1, address: 0x21, registers: [{register: 1, value: 0x10}]}\n`)).brief, [
      ["i2c(1, 0x21)", "register_0x01[test_config0]", "failed", "i2cget not found: install the Debian package i2c-tools"],
    ]);
    assert.match(await refused(`tests:\n  c:\n  - i2c_registers: {bus: 1, address: 0x90, registers: [{register: 1, value: 2}]}\n`), /parameter 'address': expected a 7-bit address/);
    assert.match(await refused(`tests:\n  c:\n  - i2c: {bus: 1, devices: [{name: x}]}\n`), /parameter 'devices\.0': expected \{name, address\}/);
  });
});

describe("spi", () => {
  const yaml = `tests:\n  spi_test:\n  - spi:\n      bus: 0\n      device: 0\n`;
  const rowsOf = (status: [string, string], loopback: [string, string]) => [
    ["/dev/spidev0.0", "exists[test_config0]", ...status],
    ["/dev/spidev0.0", "loopback[test_config0]", ...loopback],
  ];

  test("a character device that loops the pattern back, with spidev_test; the tool gets the device path and the pattern's file", async () => {
    board.charDevice("dev/spidev0.0").file("tools/spi/spidev0.0/loop");
    const { rows, id } = await run(yaml);
    assert.deepEqual(
      rows.map((r) => [r["device name"], r["test name"], r.module, r.status, r.message]),
      [
        ["/dev/spidev0.0", "exists[test_config0]", "test.py::TestSPI::test_exists[test_config0]", "passed", ""],
        ["/dev/spidev0.0", "loopback[test_config0]", "test.py::TestSPI::test_loopback[test_config0]", "passed", ""],
      ],
    );
    assert.match(log("spi.log"), new RegExp(`^spidev_test -D ${board.dev}/spidev0\\.0 -i \\S+/\\.spi-sent-\\S+ -o \\S+/\\.spi-received-\\S+\\n$`));
    // The pattern and the answer are the module's, not the run's artifacts.
    const artifacts = await s.request(`/api/v1/test-runs/${id}/artifacts`, { token: s.adminToken });
    assert.deepEqual(await artifacts.json(), []);
  });

  test("Debian's spi-tools when there is no spidev_test; a bus that does not loop back", async () => {
    board.charDevice("dev/spidev0.0").file("tools/spi/spidev0.0/loop");
    board.toolsOnly("spi-pipe");
    assert.deepEqual((await run(yaml)).brief, rowsOf(["passed", ""], ["passed", ""]));
    assert.match(log("spi.log"), new RegExp(`^spi-pipe -d ${board.dev}/spidev0\\.0 -b 256 -n 1\\n$`));
    board.reset();
    board.charDevice("dev/spidev0.0");
    board.toolsOnly("spi-pipe");
    assert.deepEqual((await run(yaml)).brief, rowsOf(["passed", ""], ["failed", "AssertionError: SPI device does not loop back"]));
    board.tools(true);
    assert.deepEqual((await run(yaml)).brief, rowsOf(["passed", ""], ["failed", "AssertionError: SPI device does not loop back"]));
  });

  test("a missing node, one that is no character device, the loopback left out", async () => {
    assert.deepEqual((await run(yaml)).brief, rowsOf(["failed", "AssertionError: /dev/spidev0.0 does not exist"], ["failed", "spidev_test exited with status 1: can't open device: No such file or directory"]));
    board.file("dev/spidev0.0").file("tools/spi/spidev0.0/loop");
    assert.deepEqual((await run(yaml)).brief, rowsOf(["failed", "AssertionError: /dev/spidev0.0 is not a character device (file)"], ["passed", ""]));
    assert.deepEqual((await run(yaml + "      loopback: false\n")).brief, rowsOf(["failed", "AssertionError: /dev/spidev0.0 is not a character device (file)"], ["skipped", "Skipped: loopback parameter is false"]));
    assert.match(await refused(`tests:\n  s:\n  - spi: {bus: 0, device: -1}\n`), /parameter 'device': expected a number from 0/);
    assert.match(await refused(`tests:\n  s:\n  - spi: {bus: /dev/spidev0.0, device: 0}\n`), /parameter 'bus': expected an integer/);
  });

  test("without spidev_test and spi-tools the case names the package", async () => {
    board.charDevice("dev/spidev0.0");
    board.tools(false);
    assert.deepEqual((await run(yaml)).brief, rowsOf(["passed", ""], ["failed", "spidev_test and spi-pipe not found: install the Debian package spi-tools"]));
  });
});

describe("camera", () => {
  const yaml = `tests:\n  camera_test:\n  - camera:\n      device: "/dev/video0"\n      camera_name: "vivid"\n      driver_name: "vivid"\n      save_file: frame.png\n`;

  test("a frame saved as an artifact, device and driver names; v4l2-ctl gets the device path", async () => {
    board.file("dev/video0").file("tools/v4l2/video0/frame", testCardPng()).file("tools/v4l2/video0/driver", "vivid").file("tools/v4l2/video0/card", "vivid");
    board.file("sys/class/video4linux/video0/name", "vivid\n");
    const { brief, id } = await run(yaml);
    assert.deepEqual(brief, [
      ["/dev/video0", "frame[test_config0]", "passed", ""],
      ["/dev/video0", "device_name[test_config0]", "passed", ""],
      ["/dev/video0", "driver_name[test_config0]", "passed", ""],
    ]);
    assert.match(log("v4l2.log"), new RegExp(`^v4l2-ctl -d ${board.dev}/video0 --stream-mmap --stream-count=1 --stream-to=\\S+/frame\\.png$`, "m"));
    const frame = await s.request(`/api/v1/test-runs/${id}/artifacts/frame.png`, { token: s.adminToken });
    assert.equal(frame.status, 200);
    assert.deepEqual(Buffer.from(await frame.arrayBuffer()), testCardPng());
  });

  test("an empty frame, wrong names, a missing device", async () => {
    board.file("dev/video0").file("tools/v4l2/video0/frame", "").file("tools/v4l2/video0/driver", "uvcvideo").file("tools/v4l2/video0/card", "HD Webcam");
    // The device name carries udev's model where udev knows the device.
    board.file("tools/udev/video0", "DEVNAME=/dev/video0\nID_MODEL=HD_Webcam\nID_V4L_PRODUCT=HD Webcam C270\n");
    const { brief } = await run(yaml + `  - camera: {device: /dev/video2}\n`);
    assert.deepEqual(brief, [
      ["HD Webcam C270(/dev/video0)", "frame[test_config0]", "failed", "AssertionError: The frame is invalid"],
      ["HD Webcam C270(/dev/video0)", "device_name[test_config0]", "failed", "AssertionError: The device name is not correct"],
      ["HD Webcam C270(/dev/video0)", "driver_name[test_config0]", "failed", "AssertionError: The driver name is not correct"],
      ["/dev/video2", "frame[test_config1]", "failed", "AssertionError: Device /dev/video2 doesn't exist"],
      ["/dev/video2", "device_name[test_config1]", "failed", "AssertionError: Device /dev/video2 doesn't exist"],
      ["/dev/video2", "driver_name[test_config1]", "failed", "AssertionError: Device /dev/video2 doesn't exist"],
    ]);
  });

  test("without save_file the frame is checked and not kept", async () => {
    board.file("dev/video0").file("tools/v4l2/video0/frame", "YUYV");
    const { brief, id } = await run(`tests:\n  c:\n  - camera: {device: /dev/video0}\n`);
    assert.deepEqual(brief, [
      ["/dev/video0", "frame[test_config0]", "passed", ""],
      ["/dev/video0", "device_name[test_config0]", "skipped", "Skipped: camera_name parameter not set"],
      ["/dev/video0", "driver_name[test_config0]", "skipped", "Skipped: driver_name parameter not set"],
    ]);
    const artifacts = await s.request(`/api/v1/test-runs/${id}/artifacts`, { token: s.adminToken });
    assert.deepEqual(await artifacts.json(), []);
  });

  test("without v4l-utils", async () => {
    board.file("dev/video0");
    board.tools(false);
    assert.deepEqual((await run(yaml)).brief, [
      ["/dev/video0", "frame[test_config0]", "failed", "v4l2-ctl not found: install the Debian package v4l-utils"],
      ["/dev/video0", "device_name[test_config0]", "failed", "v4l2-ctl not found: install the Debian package v4l-utils"],
      ["/dev/video0", "driver_name[test_config0]", "failed", "v4l2-ctl not found: install the Debian package v4l-utils"],
    ]);
  });
});

describe("memtester", () => {
  test("passes on exit 0 with the reference's command line; an error's return code; no memtester", async () => {
    const yaml = `tests:\n  memory_test:\n  - memtester:\n      memory: "10M"\n      iterations: 2\n`;
    assert.deepEqual((await run(yaml)).brief, [["/dev/mem", "memory[test_config0]", "passed", ""]]);
    assert.equal(log("memtester.log"), "memtester 10M 2\n");

    board.file("tools/memtester-exit", "4\n");
    const dma = await run(`tests:\n  m:\n  - memtester: {memory: 4K, physaddr: "0x10000000", device: /dev/udmabuf0}\n`);
    assert.deepEqual(dma.brief, [["/dev/udmabuf0", "memory[test_config0]", "failed", "AssertionError: Memory error was detected by memtester - return code: 4"]]);
    assert.equal(log("memtester.log"), `memtester -p 0x10000000 -d ${board.dev}/udmabuf0 4K 1\n`);

    board.tools(false);
    assert.deepEqual((await run(yaml)).brief, [["/dev/mem", "memory[test_config0]", "failed", "memtester not found: install the Debian package memtester"]]);
  });
});

describe("fpga", () => {
  const yaml = `tests:\n  fpga:\n  - fpga:\n      sysfs_interface: /sys/class/fpga_manager/fpga0/firmware\n      bitstream_path: blink.bit.bin\n`;

  test("the manager loads the bitstream and reports operating", async () => {
    board.attrs("sys/class/fpga_manager/fpga0", { firmware: "", state: "operating" }).file("firmware/blink.bit.bin", "bits");
    assert.deepEqual((await run(yaml)).brief, [
      ["/sys/class/fpga_manager/fpga0/firmware", "sysfs_interface[test_config0]", "passed", ""],
      ["/sys/class/fpga_manager/fpga0/firmware", "flashing_bitstream[test_config0]", "passed", ""],
    ]);
    assert.equal(readFileSync(join(board.sys, "class/fpga_manager/fpga0/firmware"), "utf8"), "blink.bit.bin");
  });

  test("a manager in error, a missing bitstream, no manager", async () => {
    board.attrs("sys/class/fpga_manager/fpga0", { firmware: "", state: "write error" }).file("firmware/blink.bit.bin", "bits");
    assert.deepEqual((await run(yaml)).brief[1], [
      "/sys/class/fpga_manager/fpga0/firmware",
      "flashing_bitstream[test_config0]",
      "failed",
      "AssertionError: /sys/class/fpga_manager/fpga0/state is 'write error' after the load, expected 'operating'",
    ]);
    board.reset();
    assert.deepEqual((await run(yaml)).brief, [
      ["/sys/class/fpga_manager/fpga0/firmware", "sysfs_interface[test_config0]", "failed", "AssertionError: /sys/class/fpga_manager/fpga0/firmware does not exist"],
      ["/sys/class/fpga_manager/fpga0/firmware", "flashing_bitstream[test_config0]", "failed", "AssertionError: Bitstream file does not exist"],
    ]);
  });
});

test("no module reads or writes outside the board's trees: not by path, not by a link planted in them", async () => {
  for (const entry of [
    "thermal: {path: /proc/self/environ, max: 1}",
    `thermal: {path: "/sys/../${s.dataDir}/admin.token", max: 1}`,
    `adc: {sysfs_path: "${s.dataDir}"}`,
    "dac: {sysfs_path: /sys/../etc}",
    "camera: {device: /etc/passwd}",
    "memtester: {memory: 1M, physaddr: '0x0', device: /proc/kcore}",
    "fpga: {sysfs_interface: /sys/class/fpga_manager/fpga0/firmware, bitstream_path: ../../etc/passwd}",
  ]) {
    assert.match(await refused(`tests:\n  t:\n  - ${entry}\n`), /parameter '\w+': ('\.\.' is not allowed|expected a path under \/(sys|dev))/, entry);
  }
  // What a successful escape would read: an ADC channel in the data dir.
  writeFileSync(join(s.dataDir, "in_voltage0_raw"), "1\n");
  writeFileSync(join(s.dataDir, "in_voltage0_scale"), "1\n");
  board.link("sys/bus/iio/devices/iio:device9", s.dataDir);
  board.link("sys/class/fpga_manager/fpga0", s.dataDir);
  board.link("sys/class/thermal/thermal_zone0", s.dataDir);
  board.link("dev/fd", "/proc/self/fd");
  board.link("firmware/evil.bin", join(s.dataDir, "admin.token"));
  const { brief } = await run(
    [
      "tests:",
      "  t:",
      '  - adc: {sysfs_path: "/sys/bus/iio/devices/iio:device9", channel: 0, max_voltage: 5}',
      "  - thermal: {zone: cpu-thermal, max: 100}",
      "  - fpga: {sysfs_interface: /sys/class/fpga_manager/fpga0/firmware, bitstream_path: evil.bin}",
      "  - memtester: {memory: 1M, physaddr: '0x0', device: /dev/fd/1}",
      "",
    ].join("\n"),
  );
  const out = "leads outside /sys";
  assert.deepEqual(brief, [
    ["ADC(/sys/bus/iio/devices/iio:device9)", "is_alive[test_config0]", "failed", `/sys/bus/iio/devices/iio:device9 ${out}`],
    ["ADC(/sys/bus/iio/devices/iio:device9)", "device_name[test_config0]", "skipped", "Skipped: device_name parameter not set"],
    ["ADC(/sys/bus/iio/devices/iio:device9)", "read_adc[test_config0]", "failed", `/sys/bus/iio/devices/iio:device9/in_voltage0_raw ${out}`],
    ["thermal zone cpu-thermal", "range[test_config0]", "failed", `/sys/class/thermal/thermal_zone0/type ${out}`],
    ["/sys/class/fpga_manager/fpga0/firmware", "sysfs_interface[test_config0]", "failed", `/sys/class/fpga_manager/fpga0/firmware ${out}`],
    ["/sys/class/fpga_manager/fpga0/firmware", "flashing_bitstream[test_config0]", "failed", "evil.bin leads outside the firmware directory"],
    ["/dev/fd/1", "memory[test_config0]", "failed", "/dev/fd/1 leads outside /dev"],
  ]);
  // Nothing was written there either.
  assert.equal(existsSync(join(s.dataDir, "firmware")), false);
});
