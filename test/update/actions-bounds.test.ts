/*
 * Issue 25: a fan-out's cost follows what the caller may touch, and queued actions are bounded:
 * at most update_server.max_queued_actions waiting per device (429 for that device beyond), and
 * at most max_queued_per_request offline devices queued by one request.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { FAST_SERVER } from "./helpers/agents.ts";
import { nextMac, seedDevices } from "./helpers/devices.ts";

const server = useTestServer({ update_server: { ...FAST_SERVER.update_server, max_queued_actions: 3, max_queued_per_request: 4 } });

type Result = { device: string; status: number; error?: string };
const fanOut = async (devices: string[], token = server.adminToken): Promise<Result[]> => {
  const res = await server.request("/api/v2/devices/action/exec", { method: "POST", token, json: { action_id: "hello", devices } });
  assert.equal(res.status, 200);
  return ((await res.json()) as { results: Result[] }).results;
};
const exec = (mac: string) => server.request(`/api/v2/devices/${mac}/action/exec/hello`, { token: server.adminToken });
const waiting = async (mac: string) => (await server.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM action_log WHERE mac_address = ? AND status = 'pending'", [mac]))!.n;

test("a device's queue holds max_queued_actions; beyond, 429 for that device only, in a fan-out too; emptied, it takes more", async () => {
  const [full, other] = await seedDevices(server, 2);
  for (let i = 0; i < 3; i++) assert.equal((await exec(full.mac)).status, 202);
  const refused = await exec(full.mac);
  assert.equal(refused.status, 429);
  assert.match(((await refused.json()) as { error: string }).error, /3 actions waiting already/);
  const results = await fanOut([full.mac, other.mac]);
  assert.deepEqual(
    results.map((r) => [r.device, r.status]),
    [
      [full.mac, 429],
      [other.mac, 202],
    ],
  );
  // Requests sent together count what the others are writing: still three.
  const together = await Promise.all([exec(other.mac), exec(other.mac), exec(other.mac)]);
  assert.deepEqual(together.map((r) => r.status).sort(), [202, 202, 429]);
  assert.equal(await waiting(other.mac), 3);
  assert.equal(await waiting(full.mac), 3, "nothing more was stored for the full device");
  assert.equal((await server.request(`/api/v2/devices/${full.mac}/action/pending`, { method: "DELETE", token: server.adminToken })).status, 200);
  assert.equal((await exec(full.mac)).status, 202);
});

test("one fan-out queues for at most max_queued_per_request offline devices; the rest get 429", async () => {
  const devices = await seedDevices(server, 6);
  const results = await fanOut(devices.map((d) => d.mac));
  assert.deepEqual(
    results.map((r) => r.status),
    [202, 202, 202, 202, 429, 429],
  );
  assert.match(results[5].error!, /at most 4 offline devices/);
  assert.equal(await waiting(devices[5].mac), 0);
});

test("the permission answers of a fan-out, in one query: 404 unknown or hidden, 403 read without update, the rest go ahead", async () => {
  const [readable, hidden, updatable] = await seedDevices(server, 3);
  for (const [device, permission] of [
    [readable, "read"],
    [updatable, "read"],
    [updatable, "update"],
  ] as const) {
    const grant = await server.request("/api/v1/permissions", { method: "POST", token: server.adminToken, json: { user_id: "bounded", resource: "device", resource_id: device.id, permission } });
    assert.equal(grant.status, 200);
  }
  const unknown = nextMac();
  const results = await fanOut([readable.mac, hidden.mac, updatable.mac, unknown], server.token([], "bounded"));
  assert.deepEqual(results, [
    { device: readable.mac, status: 403, error: "insufficient permission to a resource" },
    { device: hidden.mac, status: 404, error: "device does not exist" },
    { device: updatable.mac, status: 202 },
    { device: unknown, status: 404, error: "device does not exist" },
  ]);
  // A caller without any permission: every device its 404, nothing stored.
  const nobody = await fanOut([readable.mac, hidden.mac], server.token(["tests_ro"], "nobody"));
  assert.deepEqual(nobody.map((r) => r.status), [404, 404]);
  assert.equal(await waiting(readable.mac), 0);
});
