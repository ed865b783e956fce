/*
 * Board power (issue 46): POST /api/v2/devices/{id}/power/{on|off|cycle} through each driver,
 * against Debian's real pdudaemon, fake Tasmota and Shelly plugs and commands; what is
 * remembered and audited, and what is not when the PDU fails; who may switch a board.
 */
import assert from "node:assert/strict";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { runInProcess } from "../helpers/cli.ts";
import { tempDir, useTestServer } from "../helpers/server.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { freePort, labConfig, startPdudaemon, startPlug, type FakePlug, type Pdudaemon } from "./helpers.ts";

const MACS = {
  pdu: "02:00:00:46:00:01",
  tasmota: "02:00:00:46:00:02",
  shelly: "02:00:00:46:00:03",
  command: "02:00:00:46:00:04",
  deadPdu: "02:00:00:46:00:05",
  gpio: "02:00:00:46:00:06",
  uhubctl: "02:00:00:46:00:07",
  serialOnly: "02:00:00:46:00:08",
  plain: "02:00:00:46:00:09",
  badGpio: "02:00:00:46:00:0a",
};
const dir = tempDir("labgate-power-");
const commandLog = join(dir, "command.log");
const toolLog = join(dir, "tool.log");
/** A stand-in for gpioset and uhubctl: writes its arguments; `fail` in them makes it fail. */
const tool = join(dir, "tool");
writeFileSync(tool, `#!/bin/sh\necho "$*" >> ${toolLog}\ncase "$*" in *fail*) echo "no such line" >&2; exit 3;; esac\n`);
chmodSync(tool, 0o755);

let pdu: Pdudaemon;
let tasmota: FakePlug;
let shelly: FakePlug;
const server = useTestServer(async () => {
  [pdu, tasmota, shelly] = await Promise.all([startPdudaemon(), startPlug("tasmota"), startPlug("shelly")]);
  return {
    lab: labConfig([
      { device: MACS.pdu, power: { driver: "pdudaemon", url: pdu.url, hostname: "pdu1", port: 3, delay: 0 } },
      { device: MACS.tasmota, power: { driver: "tasmota", url: tasmota.url, relay: 2, delay: 0 } },
      { device: MACS.shelly, power: { driver: "shelly", url: shelly.url, delay: 0 } },
      {
        device: "bench-4",
        power: { driver: "command", on: ["sh", "-c", `echo on >> ${commandLog}`], off: ["sh", "-c", `echo off >> ${commandLog}`], delay: 0 },
      },
      { device: MACS.deadPdu, power: { driver: "pdudaemon", url: `http://127.0.0.1:${await freePort()}`, hostname: "pdu1", port: 5, timeout: 2 } },
      { device: MACS.gpio, power: { driver: "gpio", chip: "gpiochip0", line: 17, active_low: true, program: tool, delay: 0 } },
      { device: MACS.uhubctl, power: { driver: "uhubctl", location: "1-1", port: 2, program: tool, delay: 1 } },
      { device: MACS.serialOnly, serial: { tcp: "127.0.0.1:1" } },
      { device: MACS.badGpio, power: { driver: "gpio", chip: "fail", line: 1, program: tool } },
    ]),
  };
});
after(async () => {
  pdu?.close();
  await Promise.all([tasmota?.close(), shelly?.close()]);
});

const ids: Record<keyof typeof MACS, number> = {} as never;
async function setup(): Promise<void> {
  if (ids.pdu) return;
  const seeded = await seedDevices(server, Object.keys(MACS).length);
  const names = Object.keys(MACS) as (keyof typeof MACS)[];
  await server.db.write(async (tx) => {
    for (const [i, name] of names.entries()) {
      // The command board is named by its device name, the others by MAC address.
      await tx.run("UPDATE devices SET mac_address = ?, name = ? WHERE id = ?", [MACS[name], name === "command" ? "bench-4" : MACS[name], seeded[i]!.id]);
      ids[name] = seeded[i]!.id;
    }
  });
}
const power = (name: keyof typeof MACS, action: string, token?: string) => server.call("POST", `/api/v2/devices/${ids[name]}/power/${action}`, undefined, token);
const state = (name: keyof typeof MACS, token?: string) => server.call("GET", `/api/v2/devices/${ids[name]}/power`, undefined, token);
const audited = (id: number) =>
  server.db.all<{ action: string; actor: string }>("SELECT action, actor FROM audit_log WHERE target = ? AND action LIKE 'power.%' ORDER BY id", [`device:${id}`]);

describe("board power", () => {
  test("pdudaemon: on, off and cycle reach the PDU's port; the state and who did it are kept and audited", async () => {
    await setup();
    assert.deepEqual((await state("pdu")).body, { device_id: ids.pdu, driver: "pdudaemon", state: "unknown", last_action: null, busy: false, may_switch: true, console: false, console_write: false });
    const on = await power("pdu", "on");
    assert.equal(on.status, 200, JSON.stringify(on.body));
    assert.equal(on.body.state, "on");
    assert.deepEqual(pdu.asked(), ["3 on"]);
    assert.equal((await power("pdu", "off")).body.state, "off");
    const cycle = await power("pdu", "cycle");
    assert.equal(cycle.status, 200);
    assert.deepEqual(pdu.asked(), ["3 on", "3 off", "3 off", "3 on"], "a cycle is pdudaemon's reboot: off, then on");
    const now = (await state("pdu")).body;
    assert.equal(now.state, "on");
    assert.equal(now.last_action.action, "cycle");
    assert.equal(now.last_action.by, "admin");
    assert.ok(Math.abs(Date.parse(now.last_action.at) - Date.now()) < 60_000);
    assert.deepEqual(
      (await audited(ids.pdu)).map((a) => a.action),
      ["power.on", "power.off", "power.cycle"],
    );
  });

  test("tasmota and shelly: their HTTP APIs, a cycle is off then on", async () => {
    await setup();
    assert.equal((await power("tasmota", "cycle")).status, 200);
    assert.deepEqual(tasmota.requests, ["/cm?cmnd=Power2%20Off", "/cm?cmnd=Power2%20On"]);
    assert.equal(tasmota.on, true);
    assert.equal((await power("shelly", "on")).status, 200);
    assert.equal((await power("shelly", "off")).status, 200);
    assert.deepEqual(shelly.requests, ["/relay/0?turn=on", "/relay/0?turn=off"]);
    assert.equal((await state("shelly")).body.state, "off");
  });

  test("command, gpio and uhubctl run their programs (a board named by device name)", async () => {
    await setup();
    assert.equal((await power("command", "cycle")).status, 200);
    assert.equal(readFileSync(commandLog, "utf8"), "off\non\n");
    assert.equal((await power("gpio", "off")).status, 200);
    assert.equal((await power("uhubctl", "cycle")).status, 200);
    assert.deepEqual(readFileSync(toolLog, "utf8").split("\n").filter(Boolean), ["--active-low gpiochip0 17=0", "-l 1-1 -p 2 -a cycle -d 1"]);
  });

  test("a PDU that fails or does not answer is a 502 with the reason; nothing is recorded as done", async () => {
    await setup();
    const dead = await power("deadPdu", "on");
    assert.equal(dead.status, 502);
    assert.match(dead.body.error, /^pdudaemon at http:\/\/127\.0\.0\.1:\d+ could not be reached: ECONNREFUSED/);
    assert.equal((await state("deadPdu")).body.state, "unknown");
    assert.deepEqual(await audited(ids.deadPdu), []);

    const before = (await state("shelly")).body;
    shelly.failWith = 503;
    const broken = await power("shelly", "on");
    shelly.failWith = undefined;
    assert.equal(broken.status, 502);
    assert.match(broken.body.error, /^shelly at http:\/\/127\.0\.0\.1:\d+ answered 503: broken$/);
    tasmota.stuck = true;
    const stuck = await power("tasmota", "off");
    tasmota.stuck = false;
    assert.equal(stuck.status, 502);
    assert.match(stuck.body.error, /answered \{"POWER2":"ON"\} instead of POWER2 OFF/);
    assert.deepEqual((await state("shelly")).body, before);
    assert.equal((await state("tasmota")).body.state, "on");

    // A program that exits non-zero: its exit status and what it said.
    const failed = await power("badGpio", "on");
    assert.equal(failed.status, 502);
    assert.match(failed.body.error, /^tool exited with 3: no such line$/);
    assert.equal((await state("badGpio")).body.state, "unknown");
  });

  test("a device without a board or without a power port is a 409 naming it; an unknown action or device a 404", async () => {
    await setup();
    const none = await power("plain", "on");
    assert.equal(none.status, 409);
    assert.equal(none.body.error, `device ${MACS.plain} is not a board of lab.boards`);
    const serialOnly = await power("serialOnly", "cycle");
    assert.equal(serialOnly.status, 409);
    assert.equal(serialOnly.body.error, `board ${MACS.serialOnly} has no power port in lab.boards`);
    assert.deepEqual((await state("plain")).body, { device_id: ids.plain, driver: null, state: "unknown", last_action: null, busy: false, may_switch: false, console: false, console_write: false });
    assert.deepEqual([(await state("serialOnly")).body.driver, (await state("serialOnly")).body.console], [null, true]);
    assert.equal((await power("pdu", "toggle")).status, 404);
    assert.equal((await server.call("POST", "/api/v2/devices/999999/power/on")).status, 404);
  });

  test("switching needs power on the device (or svc_admin_rw); reading needs read", async () => {
    await setup();
    const before = pdu.asked().length;
    const bob = server.token([], "bob46");
    assert.equal((await power("pdu", "off", bob)).status, 403);
    assert.equal((await state("pdu", bob)).status, 404, "a board bob may not read is hidden");
    const grant = (permission: string) =>
      server.call("POST", "/api/v1/permissions", { user_id: "bob46", resource: "device", resource_id: ids.pdu, permission });
    assert.equal((await grant("read")).status, 200);
    assert.equal((await state("pdu", bob)).body.may_switch, false);
    assert.equal((await power("pdu", "off", bob)).status, 403, "read is not power");
    assert.equal(pdu.asked().length, before, "a refused request reaches no PDU");
    assert.equal((await grant("power")).status, 200);
    assert.equal((await state("pdu", bob)).body.may_switch, true);
    const off = await power("pdu", "off", bob);
    assert.equal(off.status, 200);
    assert.equal(off.body.last_action.by, "bob46");
    assert.deepEqual((await audited(ids.pdu)).at(-1), { action: "power.off", actor: "bob46" });
    // power applies to devices only.
    const onGroup = await server.call("POST", "/api/v1/permissions", { user_id: "bob46", resource: "group", resource_id: 1, permission: "power" });
    assert.equal(onGroup.status, 422);
  });
});

describe("lab.boards at start", () => {
  for (const [name, lab, message] of [
    ["an unknown driver", { boards: [{ device: "b", power: { driver: "x10" } }] }, /config key lab\.boards\.0\.power\.driver: expected one of pdudaemon, command, tasmota, shelly, gpio, uhubctl, got "x10"/],
    ["an unknown key of a driver", { boards: [{ device: "b", power: { driver: "shelly", url: "http://p", channel: 1 } }] }, /config key lab\.boards\.0\.power\.channel: unknown key for driver shelly/],
    ["an unknown key of a board", { boards: [{ device: "b", pdu: 1 }] }, /config key lab\.boards\.0\.pdu: unknown key/],
    ["a bad serial port", { boards: [{ device: "b", serial: { tcp: "nohost" } }] }, /config key lab\.boards\.0\.serial: expected \{port: \/dev\/ttyUSB0, baud: 115200\} or \{tcp: "host:port"\}/],
    ["a board given twice", { boards: [{ device: "02:00:00:00:00:AA" }, { device: "02:00:00:00:00:aa" }] }, /config key lab\.boards\.1\.device: "02:00:00:00:00:aa" is already board 0/],
  ] as const) {
    test(`${name} exits 2 naming the key`, async () => {
      const where = tempDir();
      writeFileSync(join(where, "c.yaml"), JSON.stringify({ lab }));
      const result = await runInProcess(["serve", "--config", join(where, "c.yaml"), "--data-dir", join(where, "data")]);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
    });
  }
});
