/*
 * Issue 25: device logs bounded in bytes. An entry over 4 KiB of UTF-8 is a 413, a device keeps
 * at most device_log_bytes_per_device bytes (the oldest go), sends at most
 * device_logs_per_minute entries (429 with Retry-After, update checks unaffected), and every list
 * pages with limit/offset and tells X-Total-Count; unpaged, the same entries come streamed.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { json, registerDevice } from "./helpers/devices.ts";

type Log = { id: number; device_id: number; name: string; entry: string };
type Device = Awaited<ReturnType<typeof registerDevice>>;

const server = useTestServer({ update_server: { device_log_bytes_per_device: 8192, device_logs_per_minute: 20, device_logs_per_device: 1000 } });

const at = (second: number) => `Mon, 23 Nov 2026 10:${String(Math.floor(second / 60)).padStart(2, "0")}:${String(second % 60).padStart(2, "0")} +0000`;
const batch = (entries: Array<[number, string]>) => ({ batch: entries.map(([second, entry]) => ({ device_timestamp: at(second), name: "n", entry })) });
const post = (device: Device, body: unknown) => device.client.request("/api/v1/logs", { method: "POST", json: body });
const logsOf = (device: Device, query = "") => server.request(`/api/v1/logs/device/${device.id}${query}`, { token: server.adminToken });

test("an entry over 4096 bytes of UTF-8 is a 413 and stores nothing; 4096 bytes is fine", async () => {
  const device = await registerDevice(server);
  const threeByte = "€".repeat(1366); // 4098 bytes in 1366 characters
  const refused = await post(device, batch([[1, "ok"], [2, threeByte]]));
  assert.equal(refused.status, 413);
  assert.match((await json(refused)).error, /batch entry 1: "entry" is longer than 4096 bytes/);
  assert.deepEqual(await json(logsOf(device)), []);
  assert.equal((await post(device, batch([[1, "€".repeat(1365) + "x"]]))).status, 200, "4096 bytes");
});

test("a device keeps at most device_log_bytes_per_device bytes: the oldest entries go", async () => {
  const device = await registerDevice(server);
  // Four entries of 4001 bytes (name "n" and 4000 bytes of text) each: 8192 bytes hold two.
  for (const second of [1, 2, 3, 4]) assert.equal((await post(device, batch([[second, String(second).repeat(4000)]]))).status, 200);
  const kept = await json<Log[]>(logsOf(device));
  assert.deepEqual(kept.map((l) => l.entry[0]), ["4", "3"]);
  const stored = (await server.db.get<{ bytes: number }>("SELECT SUM(bytes) AS bytes FROM device_logs WHERE device_id = ?", [device.id]))!;
  assert.equal(stored.bytes, 8002);
});

test("a device over device_logs_per_minute gets 429 with Retry-After; its update checks are answered meanwhile; the allowance refills", async () => {
  const device = await registerDevice(server);
  const entries = (n: number, from: number) => batch(Array.from({ length: n }, (_, i) => [from + i, "x"] as [number, string]));
  assert.equal((await post(device, entries(15, 0))).status, 200);
  const over = await post(device, entries(10, 100));
  assert.equal(over.status, 429);
  assert.match((await json(over)).error, /more than 20 log entries a minute/);
  assert.equal(over.headers["retry-after"], "15", "5 entries short at 20 a minute");
  const check = await device.client.request("/api/v1/update/check", { method: "POST", json: { "svc.software.version": "v1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.client.mac } });
  assert.ok(check.status === 200 || check.status === 204, `update check answered ${check.status}`);
  assert.equal((await json<Log[]>(logsOf(device))).length, 15, "the refused batch stored nothing");
  server.clock.advance(15_000);
  assert.equal((await post(device, entries(10, 100))).status, 200);
  assert.equal((await post(device, entries(1, 200))).status, 429, "the bucket is empty again");
  server.clock.advance(60_000);
  assert.equal((await post(device, entries(20, 300))).status, 200, "a full minute refills it, no more");
  assert.equal((await post(device, entries(1, 400))).status, 429);
});

test("log lists page with limit and offset and tell X-Total-Count; unpaged, the same entries come whole", async () => {
  const devices = [await registerDevice(server), await registerDevice(server)];
  const group = await json<{ id: number }>(server.request("/api/v2/groups", { method: "POST", token: server.adminToken, json: { metadata: {} } }));
  await server.request(`/api/v2/groups/${group.id}/devices`, { method: "PATCH", token: server.adminToken, json: { add: devices.map((d) => d.id), remove: [] } });
  for (const [i, device] of devices.entries()) assert.equal((await post(device, batch(Array.from({ length: 15 }, (_, k) => [k * 2 + i, `${i}-${k}`] as [number, string])))).status, 200);

  const whole = await server.request(`/api/v1/logs/group/${group.id}`, { token: server.adminToken });
  assert.equal(whole.status, 200);
  assert.equal(whole.headers.get("x-total-count"), "30");
  assert.match(whole.headers.get("content-type")!, /^application\/json/);
  const text = await whole.text();
  assert.ok(text.endsWith("]\n"));
  const all = JSON.parse(text) as Log[];
  assert.equal(all.length, 30);
  assert.deepEqual(all.slice(0, 3).map((l) => l.entry), ["1-14", "0-14", "1-13"], "newest device time first");

  const pages: Log[] = [];
  for (let offset = 0; offset < 30; offset += 7) {
    const res = await server.request(`/api/v1/logs/group/${group.id}?limit=7&offset=${offset}`, { token: server.adminToken });
    assert.equal(res.headers.get("x-total-count"), "30");
    pages.push(...((await res.json()) as Log[]));
  }
  assert.deepEqual(pages, all);
  const filtered = await logsOf(devices[0], "?limit=2&offset=1");
  assert.equal(filtered.headers.get("x-total-count"), "15");
  assert.deepEqual(((await filtered.json()) as Log[]).map((l) => l.entry), ["0-13", "0-12"]);
  for (const query of ["?limit=0", "?limit=1001", "?offset=-1", "?limit=x"]) assert.equal((await logsOf(devices[0], query)).status, 400, query);
});

test("an unpaged list of more entries than a page streams them all, in order", async () => {
  const device = await registerDevice(server);
  // 1,200 entries (past the 500 of a streamed page), sent as a stored batch would be: straight into the table.
  await server.db.write(async (tx) => {
    for (let i = 0; i < 1200; i++) {
      await tx.run("INSERT INTO device_logs (device_id, created, device_timestamp, name, entry, bytes) VALUES (?, ?, ?, 'n', ?, 2)", [
        device.id,
        "2026-11-23T10:00:00.000Z",
        // Pairs share a device time: the order falls back to the id.
        new Date(Date.UTC(2026, 10, 23, 10, 0, Math.floor(i / 2))).toISOString(),
        String(i),
      ]);
    }
  });
  const all = await json<Log[]>(logsOf(device));
  assert.equal(all.length, 1200);
  assert.deepEqual(all.map((l) => Number(l.entry)), Array.from({ length: 1200 }, (_, i) => 1199 - i));
});
