/*
 * Boards set through the API by an administrator (issue 46): POST/DELETE /api/v2/lab/boards with
 * the keys of lab.boards and the same checks; the board can be switched at once and stays after
 * a restart; a board of the config file is not changed through the API; only svc_admin_rw.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { tempDir, useTestServer } from "../helpers/server.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { labConfig } from "./helpers.ts";

const dir = tempDir("labgate-boards-");
const log = join(dir, "power.log");
writeFileSync(log, "");
const FROM_FILE = "02:00:00:46:03:01";
const server = useTestServer({ lab: labConfig([{ device: FROM_FILE, power: { driver: "command", on: ["true"], off: ["true"] } }]) });

test("an administrator sets a board, switches it, removes it; the config file's boards stay as they are", async () => {
  const [device] = await seedDevices(server, 1);
  const power = { driver: "command", on: ["sh", "-c", `echo on >> ${log}`], off: ["sh", "-c", `echo off >> ${log}`] };
  assert.equal((await server.call("POST", `/api/v2/devices/${device!.id}/power/on`)).status, 409, "not a board yet");

  const set = await server.call("POST", "/api/v2/lab/boards", { device: device!.mac.toUpperCase(), power });
  assert.equal(set.status, 200, JSON.stringify(set.body));
  assert.equal(set.body.source, "api");
  assert.equal(set.body.power.delay, 5, "the driver's defaults filled in");
  assert.equal((await server.call("POST", `/api/v2/devices/${device!.id}/power/on`)).status, 200);
  assert.equal(readFileSync(log, "utf8"), "on\n");
  const listed = (await server.call("GET", "/api/v2/lab/boards")).body as Array<{ device: string; source: string }>;
  assert.deepEqual(listed.map((b) => b.source).sort(), ["api", "config"]);
  const plug = await server.call("POST", "/api/v2/lab/boards", { device: "plug-1", power: { driver: "tasmota", url: "http://127.0.0.1:1", user: "admin", password: "hunter2" } });
  assert.equal(plug.body.power.password, "(set)", "a plug's password is not shown");
  assert.doesNotMatch(JSON.stringify((await server.call("GET", "/api/v2/lab/boards")).body), /hunter2/);
  assert.doesNotMatch(JSON.stringify(await server.db.all("SELECT detail FROM audit_log WHERE action = 'board.set'")), /hunter2/);
  assert.equal((await server.call("DELETE", "/api/v2/lab/boards/plug-1")).status, 200);

  await server.restart();
  assert.equal((await server.call("GET", `/api/v2/devices/${device!.id}/power`)).body.driver, "command", "kept across a restart");

  const audit = await server.db.all<{ action: string }>("SELECT action FROM audit_log WHERE action LIKE 'board.%' ORDER BY id");
  assert.deepEqual(audit.map((a) => a.action), ["board.set", "board.set", "board.delete"]);
  assert.equal((await server.call("DELETE", `/api/v2/lab/boards/${encodeURIComponent(device!.mac)}`)).status, 200);
  assert.equal((await server.call("POST", `/api/v2/devices/${device!.id}/power/on`)).status, 409, "no longer a board");
  assert.equal((await server.call("DELETE", `/api/v2/lab/boards/${encodeURIComponent(device!.mac)}`)).status, 404);
});

test("bad boards are 400s naming the key; the config file's board is a 409; only svc_admin_rw sets boards", async () => {
  for (const [body, message] of [
    [{ device: "b", power: { driver: "x10" } }, /^power\.driver: expected one of pdudaemon, command/],
    [{ device: "b", power: { driver: "shelly", url: "http://p", channel: 1 } }, /^power\.channel: unknown key for driver shelly$/],
    [{ device: "b", serial: { tcp: "nohost" } }, /^serial: expected/],
    [{ power: { driver: "command", on: ["true"], off: ["true"] } }, /^device: /],
    [[1, 2], /^expected a JSON object: \{device, power, serial\}$/],
  ] as const) {
    const res = await server.call("POST", "/api/v2/lab/boards", body);
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.match(res.body.error, message);
  }
  assert.equal((await server.call("GET", "/api/v2/lab/boards")).body.length, 1, "nothing was set");
  const fromFile = await server.call("POST", "/api/v2/lab/boards", { device: FROM_FILE });
  assert.equal(fromFile.status, 409);
  assert.match(fromFile.body.error, /set in the config file/);
  assert.equal((await server.call("DELETE", `/api/v2/lab/boards/${encodeURIComponent(FROM_FILE)}`)).status, 409);
  const bob = server.token(["tests_rw"], "bob46");
  assert.equal((await server.call("POST", "/api/v2/lab/boards", { device: "b" }, bob)).status, 403);
  assert.equal((await server.call("GET", "/api/v2/lab/boards", undefined, bob)).status, 403);
});
