import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";
import { removeDir, startTestServer } from "../helpers/server.ts";
import { registerDevice } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

// Section 17 item 11 (adopted by section 18): a progress record goes after a configurable idle time.
test("a progress record idle for progress_idle_timeout is dropped; the next offer starts a new one", async () => {
  const server = await startTestServer({ update_server: { progress_idle_timeout: 0.6 } });
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
    const stored = () => server.server.ctx.db.get("SELECT 1 AS x FROM progress WHERE device_id = ?", [device.id]) !== undefined;

    assert.equal((await check()).status, 200);
    assert.equal((await progress()).status, 200);
    assert.ok(await listed());

    // Idle: hidden at once, removed by the sweep soon after.
    const deadline = Date.now() + 5000;
    while (stored() && Date.now() < deadline) await sleep(50);
    assert.equal(stored(), false, "the idle record was removed");
    const gone = await progress();
    assert.equal(gone.status, 404);
    assert.deepEqual(await gone.json(), { error: "device is not updating" });
    assert.equal(await listed(), false);

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
