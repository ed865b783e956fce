import assert from "node:assert/strict";
import { test } from "node:test";
import { removeDir, startTestServer, waitFor } from "../helpers/server.ts";
import { agentClient, FAST_SERVER, offlineDeviceOfferedV9, rawDevice, startAgent } from "./helpers/agents.ts";
import { registerDevice } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

// Section 17 item 11 (adopted by section 18): a progress record goes after a configurable idle time.
test("a progress record idle for progress_idle_timeout is dropped; the next offer starts a new one", async () => {
  const server = await startTestServer({ update_server: { progress_idle_timeout: 1.5 } });
  try {
    const admin = server.adminToken;
    const device = await registerDevice(server);
    const pkg = await uploadOk(server, { token: admin, version: "v2" });
    const group = (await (await server.request("/api/v2/groups", { method: "POST", token: admin, json: { metadata: {} } })).json()) as { id: number };
    for (const [path, json] of [
      [`/api/v2/groups/${group.id}/policy`, { policy: "exact_match,v2" }],
      [`/api/v2/groups/${group.id}/package`, { packages: [pkg.id] }],
    ] as const) {
      assert.equal((await server.request(path, { method: "POST", token: admin, json })).status, 200);
    }
    assert.equal((await server.request(`/api/v2/groups/${group.id}/devices`, { method: "PATCH", token: admin, json: { add: [device.id], remove: [] } })).status, 200);
    const check = () =>
      device.client.request("/api/v1/update/check", {
        method: "POST",
        json: { "svc.software.version": "v1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.client.mac },
      });
    const progress = () => server.request(`/api/v2/devices/${device.id}/progress`, { token: admin });
    const listed = async () => ((await (await server.request("/api/v2/devices/progress", { token: admin })).json()) as { id: number }[]).some((r) => r.id === device.id);
    const stored = async () => (await server.db.get("SELECT 1 AS x FROM progress WHERE device_id = ?", [device.id])) !== undefined;

    assert.equal((await check()).status, 200);
    assert.equal((await progress()).status, 200);
    assert.ok(await listed());

    // Idle (the server's clock moved past the timeout): hidden at once, removed by the sweep
    // timer (every progress_idle_timeout) soon after.
    server.clock.advance(1600);
    const gone = await progress();
    assert.equal(gone.status, 404);
    assert.deepEqual(await gone.json(), { error: "device is not updating" });
    assert.equal(await listed(), false);
    await waitFor(async () => !(await stored()), 5000, "the sweep to remove the idle record");

    // The next check that offers the package starts a record again (nothing cached keeps it away).
    assert.equal((await check()).status, 200);
    const again = await progress();
    assert.equal(again.status, 200);
    assert.equal(((await again.json()) as { progress: number }).progress, 0);
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
});

// A device that reports its new version while its record still waits at 0 (no progress report
// in between) ends the record; if it checks again later (e.g. it rolled back), the offer must
// start a new record rather than be taken for the one already waiting.
test("update_version ends a record waiting at 0; the next offer starts a new one", async () => {
  const server = await startTestServer(FAST_SERVER);
  const agent = startAgent(server, { device_type: "board", software_version: "v1" });
  try {
    const id = await offlineDeviceOfferedV9(server, agent);

    const dev = await rawDevice(server, agent);
    try {
      const client = await agentClient(server, agent, 20);
      const status = async () => (await server.call("GET", `/api/v2/devices/${id}/progress`)).status;
      assert.equal((await client.request("/api/v1/update/check", { method: "POST", json: agent.metadata() })).status, 200);
      assert.equal(await status(), 200);
      dev.ws.send(JSON.stringify({ method: "update_version", version: "v9" }));
      await waitFor(async () => (await status()) === 404, 3000, "record ended by the new version");
      // Rolled back to v1: offered v9 again, and updating again.
      assert.equal((await client.request("/api/v1/update/check", { method: "POST", json: agent.metadata() })).status, 200);
      assert.equal(await status(), 200);
    } finally {
      dev.ws.close();
    }
  } finally {
    await agent.stop();
    await server.close();
    removeDir(server.dataDir);
  }
});
