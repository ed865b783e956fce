import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { deviceClient, json, key, registerDevice } from "./helpers/devices.ts";

const server = useTestServer();

const admin = () => server.adminToken;
const RFC822 = /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

async function group(priority: number, devices: number[]): Promise<number> {
  const created = await json(server.request("/api/v2/groups", { method: "POST", token: admin(), json: { metadata: { name: `g${priority}` }, priority } }));
  const res = await server.request(`/api/v2/groups/${created.id}/devices`, { method: "PATCH", token: admin(), json: { add: devices, remove: [] } });
  assert.equal(res.status, 200, await res.clone().text());
  return created.id;
}

test("v2 and v1 device shapes", async () => {
  const { client, id } = await registerDevice(server, { extra: { "svc.software.tags": "alpha\nbeta" } });
  const low = await group(10, [id]);
  const high = await group(30, [id]);

  const v2 = await json(server.request(`/api/v2/devices/${id}`, { token: admin() }));
  assert.deepEqual(Object.keys(v2).sort(), ["capabilities", "connected", "groups", "id", "last_access", "mac_address", "metadata", "name", "public_key"]);
  assert.equal(v2.id, id);
  assert.equal(v2.name, client.mac);
  assert.equal(v2.mac_address, client.mac);
  assert.deepEqual(v2.capabilities, {});
  assert.equal(v2.metadata["svc.hardware.macaddr"], client.mac);
  assert.deepEqual(v2.groups.sort(), [low, high].sort());
  assert.equal(v2.connected, false);
  assert.equal(v2.public_key, client.publicKeyPem);
  assert.match(v2.last_access, RFC822);

  const v1 = await json(server.request(`/api/v1/devices/${id}`, { token: admin() }));
  assert.deepEqual(Object.keys(v1).sort(), ["capabilities", "group", "id", "last_access", "mac_address", "metadata", "name", "public_key"]);
  assert.equal(v1.group, low, "v1 shows the active group: the lowest priority value");

  const listV2 = await json(server.request("/api/v2/devices", { token: admin() }));
  assert.deepEqual(listV2.find((d: { id: number }) => d.id === id), v2);
  const listV1 = await json(server.request("/api/v1/devices", { token: admin() }));
  assert.deepEqual(listV1.find((d: { id: number }) => d.id === id), v1);

  const { id: loner } = await registerDevice(server);
  const alone = await json(server.request(`/api/v1/devices/${loner}`, { token: admin() }));
  assert.equal(alone.group, null);
  assert.deepEqual((await json(server.request(`/api/v2/devices/${loner}`, { token: admin() }))).groups, []);
  // Tags came from the registration metadata (a string: one tag per line).
  assert.deepEqual(await json(server.request(`/api/v2/devices/${id}/tags`, { token: admin() })), ["alpha", "beta"]);
});

test("v1 device routes: scopes and status codes", async () => {
  const { id } = await registerDevice(server);
  const ro = server.token(["admin_ro"]);
  assert.equal((await server.request("/api/v1/devices")).status, 401);
  assert.equal((await server.request("/api/v1/devices", { token: server.token(["create_group"]) })).status, 403);
  assert.equal((await server.request("/api/v1/devices", { token: ro })).status, 200);
  assert.equal((await server.request(`/api/v1/devices/${id}`, { token: ro })).status, 200);
  assert.equal((await server.request("/api/v1/devices/999999", { token: ro })).status, 404);
  assert.equal((await server.request("/api/v1/devices/abc", { token: ro })).status, 404);
  assert.equal((await server.request(`/api/v1/devices/${id}`, { method: "DELETE", token: ro })).status, 403);
  assert.equal((await server.request(`/api/v1/devices/${id}`, { method: "DELETE", token: admin() })).status, 200);
  assert.equal((await server.request(`/api/v1/devices/${id}`, { method: "DELETE", token: admin() })).status, 404);
  assert.equal((await server.request(`/api/v1/devices/${id}`, { token: ro })).status, 404);
});

test("tags: assign is idempotent, list, remove, devices by tag", async () => {
  const { id: a } = await registerDevice(server);
  const { id: b } = await registerDevice(server);
  for (const [device, tag] of [[a, "floor-2"], [a, "floor-2"], [b, "floor-2"], [a, "zeta"], [a, "has space"]] as const) {
    const res = await server.request(`/api/v2/devices/${device}/tag/${encodeURIComponent(tag)}`, { method: "POST", token: admin() });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {});
  }
  assert.deepEqual(await json(server.request(`/api/v2/devices/${a}/tags`, { token: admin() })), ["floor-2", "has space", "zeta"]);
  const tagged = await json(server.request("/api/v2/tags/floor-2", { token: admin() }));
  assert.deepEqual(tagged.map((d: { id: number }) => d.id), [a, b]);
  assert.ok("groups" in tagged[0] && "connected" in tagged[0], "v2 device objects");
  assert.deepEqual(await json(server.request("/api/v2/tags/nobody-has-this", { token: admin() })), []);

  for (let i = 0; i < 2; i++) {
    const res = await server.request(`/api/v2/devices/${a}/tag/floor-2`, { method: "DELETE", token: admin() });
    assert.equal(res.status, 200);
  }
  assert.deepEqual(await json(server.request(`/api/v2/devices/${a}/tags`, { token: admin() })), ["has space", "zeta"]);
  assert.deepEqual((await json(server.request("/api/v2/tags/floor-2", { token: admin() }))).map((d: { id: number }) => d.id), [b]);

  assert.equal((await server.request("/api/v2/devices/999999/tag/x", { method: "POST", token: admin() })).status, 404);
  assert.equal((await server.request("/api/v2/devices/999999/tag/x", { method: "DELETE", token: admin() })).status, 404);
  assert.equal((await server.request("/api/v2/devices/999999/tags", { token: admin() })).status, 404);
  assert.equal((await server.request(`/api/v2/devices/${a}/tag/${"x".repeat(200)}`, { method: "POST", token: admin() })).status, 400);
  assert.equal((await server.request(`/api/v2/devices/${a}/tag/a%2Fb`, { method: "POST", token: admin() })).status, 400);
  assert.equal((await server.request(`/api/v2/devices/${a}/tags`)).status, 401);
});

test("deleting a device removes its dependants: memberships, tags, device permissions, pending registrations", async () => {
  const { client, id } = await registerDevice(server);
  const g = await group(50, [id]);
  await server.request(`/api/v2/devices/${id}/tag/doomed`, { method: "POST", token: admin() });
  const direct = await json(
    server.request("/api/v1/permissions", { method: "POST", token: admin(), json: { user_id: "u-del", resource: "device", resource_id: id, permission: "read" } }),
  );
  const named = await json(
    server.request("/api/v1/permissions", {
      method: "POST",
      token: admin(),
      json: { user_id: "u-del", resource: "device_by_tag", resource_name: "doomed", permission: "read" },
    }),
  );
  // A pending key change for the same MAC.
  const other = deviceClient(server, { mac: client.mac });
  assert.equal((await other.authorize()).status, "pending");

  assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: admin() })).status, 200);
  assert.deepEqual((await json(server.request(`/api/v2/groups/${g}`, { token: admin() }))).devices, []);
  assert.deepEqual(await json(server.request("/api/v2/tags/doomed", { token: admin() })), []);
  assert.equal((await server.request(`/api/v1/permissions/${direct.id}`, { token: admin() })).status, 404);
  assert.equal((await server.request(`/api/v1/permissions/${named.id}`, { token: admin() })).status, 200, "named permissions stay");
  const pending = await json(server.request("/api/v1/auth/pending", { token: admin() }));
  assert.equal(pending.filter((p: { mac_address: string }) => p.mac_address === client.mac).length, 0);
  // The group can now be deleted: no members left.
  assert.equal((await server.request(`/api/v2/groups/${g}`, { method: "DELETE", token: admin() })).status, 200);
});

test("devices survive a restart: the same key is still accepted, tags kept", async () => {
  const keys = key("ed25519", true);
  const { client, id } = await registerDevice(server, { keys });
  await server.request(`/api/v2/devices/${id}/tag/persist`, { method: "POST", token: admin() });
  await server.restart();
  assert.deepEqual(await json(server.request(`/api/v2/devices/${id}/tags`, { token: server.adminToken })), ["persist"]);
  const again = deviceClient(server, { mac: client.mac, keys });
  assert.equal((await again.authorize()).status, "accepted");
});
