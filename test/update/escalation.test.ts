/*
 * Issue 10, items 1-3: a request may not change an object's tags, groups or name in a way that
 * grants anyone a permission on it the caller does not hold (src/update/permissions/permissions.ts,
 * withinGrants), and a device's reports never rename it.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { deviceMetadata, json, registerDevice } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

const server = useTestServer();

const admin = () => server.adminToken;
async function grant(user_id: string, resource: string, target: number | string, permission: string): Promise<void> {
  const where = typeof target === "number" ? { resource_id: target } : { resource_name: target };
  const res = await server.request("/api/v1/permissions", { method: "POST", token: admin(), json: { user_id, resource, permission, ...where } });
  assert.equal(res.status, 200, await res.clone().text());
}
const tags = (id: number) => json<string[]>(server.request(`/api/v2/devices/${id}/tags`, { token: admin() }));
const visible = async (token: string) => (await json<{ id: number }[]>(server.request("/api/v2/devices", { token }))).map((d) => d.id);
let priority = 100;
async function newGroup(token: string): Promise<number> {
  const res = await server.request("/api/v2/groups", { method: "POST", token, json: { metadata: {}, priority: priority++ } });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { id: number }).id;
}
const addDevice = (token: string, group: number, device: number) =>
  server.request(`/api/v2/groups/${group}/devices`, { method: "PATCH", token, json: { add: [device], remove: [] } });
const assignPackage = (token: string, group: number, pkg: number) =>
  server.request(`/api/v2/groups/${group}/package`, { method: "POST", token, json: { packages: [pkg] } });

describe("the escalation rule (tags, groups, names)", () => {
  test("item 1: update cannot tag a device into a shell permission; holding shell can", async () => {
    const { id } = await registerDevice(server);
    await grant("bob1", "device", id, "read");
    await grant("bob1", "device", id, "update");
    await grant("bob1", "device_by_tag", "lab-shell", "shell");
    const bob = server.token([], "bob1");
    const res = await server.request(`/api/v2/devices/${id}/tag/lab-shell`, { method: "POST", token: bob });
    assert.equal(res.status, 403);
    assert.match(((await res.json()) as { error: string }).error, /^insufficient permission to a resource: the change would grant shell on device \d+/);
    assert.deepEqual(await tags(id), [], "the refused tag is not stored");
    // A tag that grants nobody anything is fine.
    assert.equal((await server.request(`/api/v2/devices/${id}/tag/plain`, { method: "POST", token: bob })).status, 200);
    // Someone who holds shell may hand the tag out, and so may an admin.
    await grant("sam1", "device", id, "update");
    await grant("sam1", "device", id, "shell");
    assert.equal((await server.request(`/api/v2/devices/${id}/tag/lab-shell`, { method: "POST", token: server.token([], "sam1") })).status, 200);
    assert.deepEqual(await tags(id), ["lab-shell", "plain"]);
    const other = (await registerDevice(server)).id;
    assert.equal((await server.request(`/api/v2/devices/${other}/tag/lab-shell`, { method: "POST", token: admin() })).status, 200);
  });

  test("item 2: update plus one's own group does not give read or delete on a device", async () => {
    const { id } = await registerDevice(server);
    await grant("bob2", "device", id, "update");
    const bob = server.token(["create_group"], "bob2");
    assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: bob })).status, 403);
    const g = await newGroup(bob);
    const res = await addDevice(bob, g, id);
    assert.equal(res.status, 403);
    assert.match(((await res.json()) as { error: string }).error, /would grant (read|delete) on device/);
    assert.equal((await server.request(`/api/v2/devices/${id}`, { token: bob })).status, 404);
    assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: bob })).status, 403);
    assert.deepEqual((await json(server.request(`/api/v2/devices/${id}`, { token: admin() }))).groups, [], "membership unchanged");
    // Holding read, update and delete already, the same move grants nothing new.
    await grant("bob2", "device", id, "read");
    await grant("bob2", "device", id, "delete");
    assert.equal((await addDevice(bob, g, id)).status, 200);
  });

  test("item 2: the same for packages", async () => {
    const pkg = await uploadOk(server, { token: admin(), version: "esc-1" });
    await grant("bob3", "package", pkg.id, "update");
    const bob = server.token(["create_group"], "bob3");
    const g = await newGroup(bob);
    const res = await assignPackage(bob, g, pkg.id);
    assert.equal(res.status, 403);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { token: bob })).status, 404);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: bob })).status, 403);
    assert.deepEqual((await json(server.request(`/api/v2/groups/${g}`, { token: admin() }))).packages, []);
  });

  test("adding to a group needs what the group's other holders would gain, not only update", async () => {
    const { id } = await registerDevice(server);
    const g = await newGroup(admin());
    await grant("eve4", "group", g, "update");
    for (const perm of ["read", "update", "delete"]) await grant("eve4", "device", id, perm);
    await grant("dan4", "group", g, "read"); // dan reads the group's devices
    const eve = server.token([], "eve4");
    // dan would gain read on the device: eve holds read, so that is fine.
    assert.equal((await addDevice(eve, g, id)).status, 200);
    // A group whose other holder has delete: eve, without delete on the device, may not add it.
    const { id: other } = await registerDevice(server);
    for (const perm of ["read", "update"]) await grant("eve4", "device", other, perm);
    const g2 = await newGroup(admin());
    await grant("eve4", "group", g2, "update");
    await grant("dan4", "group", g2, "delete");
    assert.equal((await addDevice(eve, g2, other)).status, 403, "dan would gain delete");
    await grant("eve4", "device", other, "delete");
    assert.equal((await addDevice(eve, g2, other)).status, 200);
    // A package whose group gives someone else delete: the assigner needs delete on the package.
    const pkg = await uploadOk(server, { token: admin(), version: "esc-4" });
    await grant("eve4", "package", pkg.id, "update");
    await grant("eve4", "package", pkg.id, "read");
    assert.equal((await assignPackage(eve, g2, pkg.id)).status, 403, "dan would gain delete, eve lacks it");
    await grant("eve4", "package", pkg.id, "delete");
    assert.equal((await assignPackage(eve, g2, pkg.id)).status, 200);
  });

  test("item 3: a device's reports never rename it; a management rename follows the rule", async () => {
    const { client, id } = await registerDevice(server, { extra: { "svc.device.name": "devA" } });
    await grant("alice5", "device_by_tag", "devB", "read");
    const alice = server.token([], "alice5");
    assert.deepEqual(await visible(alice), []);
    client.setMetadata(deviceMetadata(client.mac, { "svc.device.name": "devB" }));
    assert.equal((await client.authorize()).status, "accepted");
    const device = await json(server.request(`/api/v2/devices/${id}`, { token: admin() }));
    assert.equal(device.name, "devA", "the name was taken at approval");
    assert.equal(device.metadata["svc.device.name"], "devB", "the report itself is kept");
    assert.deepEqual(await visible(alice), []);

    // A manager with update only may not rename it into alice's read.
    await grant("bob5", "device", id, "update");
    const bob = server.token([], "bob5");
    const refused = await server.request(`/api/v2/devices/${id}`, { method: "PATCH", token: bob, json: { name: "devB" } });
    assert.equal(refused.status, 403);
    assert.equal((await json(server.request(`/api/v2/devices/${id}`, { token: admin() }))).name, "devA");
    assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "PATCH", token: bob, json: { name: "devC" } })).status, 200);
    for (const name of ["", " devB", "a\nb", "x".repeat(129), 5]) {
      const res = await server.request(`/api/v2/devices/${id}`, { method: "PATCH", token: admin(), json: { name } });
      assert.equal(res.status, 400, JSON.stringify(name));
    }
    assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "PATCH", token: server.token([], "nobody5"), json: { name: "x" } })).status, 403);
    assert.equal((await server.request("/api/v2/devices/999999", { method: "PATCH", token: admin(), json: { name: "x" } })).status, 404);
    const renamed = await server.request(`/api/v2/devices/${id}`, { method: "PATCH", token: admin(), json: { name: "devB" } });
    assert.equal(renamed.status, 200);
    assert.equal(((await renamed.json()) as { name: string }).name, "devB");
    assert.deepEqual(await visible(alice), [id]);
  });
});
