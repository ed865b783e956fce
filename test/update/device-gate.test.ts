import assert from "node:assert/strict";
import { test } from "node:test";
import { removeDir, startTestServer, tempDir, type TestServer } from "../helpers/server.ts";
import { deviceMetadata, json, seedDevices } from "./helpers/devices.ts";

const check = (server: TestServer, device: { mac: string; token: string }) =>
  server.request("/api/v1/update/check", { method: "POST", token: device.token, json: deviceMetadata(device.mac) });

/** `rfc822` is a time of the server's clock from `from` (ms; the column keeps whole seconds) to `to`. */
const within = (rfc822: string | null, from: number, to: number) => rfc822 !== null && Date.parse(rfc822) >= Math.floor(from / 1000) * 1000 && Date.parse(rfc822) <= to;

test("device gate: last_access of concurrent device requests is visible at once and survives a restart", async () => {
  const dir = tempDir();
  let server = await startTestServer({}, dir);
  try {
    const devices = await seedDevices(server, 30);
    const lastAccess = async (id: number): Promise<string> => (await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }))).last_access;
    // Concurrent checks (one event loop turn on the server for many of them), then each device.
    const from = server.clock.now();
    const statuses = await Promise.all(devices.map(async (d) => (await check(server, d)).status));
    const to = server.clock.now();
    assert.deepEqual(new Set(statuses), new Set([204]));
    for (const d of devices) {
      const seen = await lastAccess(d.id);
      assert.ok(within(seen, from, to), `device ${d.id}: ${seen}`);
    }
    // Checks again within the same second write nothing new but still pass.
    assert.equal((await check(server, devices[0])).status, 204);
    const stored = await Promise.all(devices.map((d) => lastAccess(d.id)));

    await server.close();
    server = await startTestServer({}, dir);
    assert.deepEqual(await Promise.all(devices.map((d) => lastAccess(d.id))), stored, "after the restart");
  } finally {
    await server.close();
    removeDir(dir);
  }
});

test("device gate: a remembered device still refuses a token for its id with another MAC, and forgets a deleted device", async () => {
  const server = await startTestServer();
  try {
    const [device, other] = await seedDevices(server, 2);
    assert.equal((await check(server, device)).status, 204); // the gate now knows the device
    const forged = { mac: other.mac, token: server.server.ctx.tokens.issueDevice(other.mac, device.id, 3600) };
    assert.equal((await check(server, forged)).status, 401);
    assert.equal((await check(server, device)).status, 204);

    assert.equal((await server.request(`/api/v2/devices/${device.id}`, { method: "DELETE", token: server.adminToken })).status, 200);
    assert.equal((await check(server, device)).status, 401);
    assert.equal((await check(server, other)).status, 204);
  } finally {
    await server.close();
  }
});
