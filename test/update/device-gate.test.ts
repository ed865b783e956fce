import assert from "node:assert/strict";
import { test } from "node:test";
import { removeDir, startTestServer, tempDir, type TestServer } from "../helpers/server.ts";
import { deviceMetadata, json, seedDevices } from "./helpers/devices.ts";

const check = (server: TestServer, device: { mac: string; token: string }) =>
  server.request("/api/v1/update/check", { method: "POST", token: device.token, json: deviceMetadata(device.mac) });

const recent = (rfc822: string | null) => rfc822 !== null && Math.abs(Date.parse(rfc822) - Date.now()) < 5000;

test("device gate: last_access of concurrent device requests is visible at once and survives a restart", async () => {
  const dir = tempDir();
  let server = await startTestServer({}, dir);
  try {
    const devices = await seedDevices(server, 30);
    // Concurrent checks (one event loop turn on the server for many of them), then each device.
    const statuses = await Promise.all(devices.map(async (d) => (await check(server, d)).status));
    assert.deepEqual(new Set(statuses), new Set([204]));
    for (const d of devices) {
      const row = await json(server.request(`/api/v2/devices/${d.id}`, { token: server.adminToken }));
      assert.ok(recent(row.last_access), `device ${d.id}: ${row.last_access}`);
    }
    // Checks again within the same second write nothing new but still pass.
    assert.equal((await check(server, devices[0])).status, 204);

    await server.close();
    server = await startTestServer({}, dir);
    for (const d of devices) {
      const row = await json(server.request(`/api/v2/devices/${d.id}`, { token: server.adminToken }));
      assert.ok(recent(row.last_access), `after restart, device ${d.id}: ${row.last_access}`);
    }
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
