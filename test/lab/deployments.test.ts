/*
 * A reserved board and deployments (issue 46): a deployment makes no offer to a board someone
 * holds (its update check finds nothing, it is not timed out as not reached); once released it
 * is offered the deployment's version like the others.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const server = useTestServer();
const DAY = 86400;
let adminToken: string | undefined;
// A token that outlives the minutes the test moves the server's clock by.
const admin = () => (adminToken ??= server.token(["admin_rw"], "lab-admin", 30 * DAY));
const call = (method: string, path: string, json?: unknown) => server.call(method, path, json, admin());

async function check(device: { mac: string; token: string }, version = "v1"): Promise<number> {
  const res = await server.request("/api/v1/update/check", { method: "POST", token: device.token, json: deviceMetadata(device.mac, { "svc.software.version": version }) });
  await res.arrayBuffer();
  return res.status;
}

test("a deployment offers nothing to a board someone holds (state reserved, a count of its own), does not time it out, and offers it once released", async () => {
  const pkg = (await uploadOk(server, { token: admin(), version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id;
  const devices = (await seedDevices(server, 2)).map((d) => ({ ...d, token: server.server.ctx.tokens.issueDevice(d.mac, d.id, 30 * DAY) }));
  const [held, free] = devices as [(typeof devices)[0], (typeof devices)[0]];
  const group = (await call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," }],
    ["POST", `/api/v2/groups/${group}/package`, { packages: [pkg] }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: [held.id, free.id], remove: [] }],
  ] as const) {
    assert.equal((await call(method, path, json)).status, 200);
  }
  assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "tester46", resource: "device", resource_id: held.id, permission: "test" })).status, 200);
  assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "tester46", resource: "device", resource_id: held.id, permission: "read" })).status, 200);
  const tester = server.token(["tests_rw"], "tester46", 30 * DAY);
  assert.equal((await server.call("POST", `/api/v2/devices/${held.id}/reservation`, { minutes: 120 }, tester)).status, 200);

  const created = await call("POST", "/api/v2/deployments", { group, version: "v2", device_timeout_minutes: 30 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(await check(free), 200, "the free board is offered v2");
  assert.equal(await check(held), 204, "the reserved board is offered nothing");

  // Past the device timeout the reserved board is still waiting, not counted as not reached.
  server.clock.advance(31 * 60_000);
  await server.server.domains.update.deployments.tick();
  const members = async () => new Map(((await call("GET", `/api/v2/deployments/${created.body.id}/devices?limit=10`)).body as Array<{ device: number; state: string }>).map((m) => [m.device, m.state]));
  assert.equal((await members()).get(free.id), "not_reached", "the offered board that never reported timed out");
  assert.equal((await members()).get(held.id), "reserved", "the held board shows reserved, not waiting or not reached");
  const counts = (await call("GET", `/api/v2/deployments/${created.body.id}`)).body.counts as Record<string, number>;
  assert.deepEqual([counts.reserved, counts.not_reached, counts.failed], [1, 1, 0], "reserved is a count of its own");
  assert.equal((await call("GET", `/api/v2/deployments/${created.body.id}/devices?state=reserved`)).body.length, 1, "the state filters the devices");
  assert.equal(await check(held), 204, "still held: still nothing");

  assert.equal((await server.call("DELETE", `/api/v2/devices/${held.id}/reservation`, undefined, tester)).status, 200);
  assert.equal(await check(held), 200, "released, it is offered v2");
  assert.equal((await members()).get(held.id), "offered");
  assert.equal(await check(held, "v2"), 204, "at v2 it has nothing more to get");
  assert.equal((await members()).get(held.id), "installed", "updated after the release");
});
