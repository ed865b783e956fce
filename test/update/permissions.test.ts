import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { json, registerDevice } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

const server = useTestServer();

const admin = () => server.adminToken;
const grant = (json: Record<string, unknown>) => server.request("/api/v1/permissions", { method: "POST", token: admin(), json });
async function grantOk(body: Record<string, unknown>): Promise<{ id: number }> {
  const res = await grant(body);
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as { id: number };
}
const ids = (list: { id: number }[]) => list.map((x) => x.id).sort((a, b) => a - b);

describe("permission API", () => {
  test("create: the permission object, and who may create", async () => {
    const { id } = await registerDevice(server);
    const body = { user_id: "api-user", resource: "device", resource_id: id, permission: "shell", id: 77, created: "ignored" };
    assert.equal((await server.request("/api/v1/permissions", { method: "POST", json: body })).status, 401);
    assert.equal((await server.request("/api/v1/permissions", { method: "POST", json: body, token: server.token([], "api-user") })).status, 403);
    assert.equal((await server.request("/api/v1/permissions", { method: "POST", json: body, token: server.token(["admin_ro"]) })).status, 403);
    const res = await grant(body);
    assert.equal(res.status, 200);
    const created = await res.json();
    assert.notEqual(created.id, 77);
    assert.match(created.created, /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/);
    assert.deepEqual(
      { ...created, id: 0, created: "" },
      { id: 0, created: "", resource: "device", resource_id: id, resource_name: null, user_id: "api-user", permission: "shell" },
    );
    const named = await grantOk({ user_id: "api-user", resource: "device_by_tag", resource_name: "lab", permission: "read" });
    assert.deepEqual(await json(server.request(`/api/v1/permissions/${named.id}`, { token: admin() })), {
      ...named,
      resource: "device_by_tag",
      resource_id: null,
      resource_name: "lab",
      user_id: "api-user",
      permission: "read",
    });
  });

  test("create: validation errors 400, 404, 409, 422", async () => {
    const { id } = await registerDevice(server);
    const base = { user_id: "val", resource: "device", resource_id: id, permission: "read" };
    const cases: [Record<string, unknown> | string, number, RegExp][] = [
      [{ ...base, user_id: undefined }, 400, /user_id/],
      [{ ...base, resource: undefined }, 400, /resource/],
      [{ ...base, permission: undefined }, 400, /permission/],
      [{ ...base, resource: "printer" }, 400, /unknown resource "printer"/],
      [{ ...base, permission: "own" }, 400, /unknown permission "own"/],
      [{ ...base, resource_id: undefined }, 400, /resource_id.*resource_name/],
      [{ ...base, resource_id: 0 }, 400, /resource_id.*resource_name/],
      [{ ...base, resource_id: "1.5" }, 400, /resource_id/],
      [{ ...base, resource_id: -3 }, 400, /resource_id/],
      [{ ...base, user_id: 5 }, 400, /user_id/],
      [{ ...base, colour: "red" }, 400, /unknown field "colour"/],
      ["[1]", 400, /JSON object/],
      ["{", 400, /malformed JSON/],
      [{ ...base, resource_id: 999999 }, 404, /device 999999 does not exist/],
      [{ ...base, resource: "group", resource_id: 999999 }, 404, /group 999999 does not exist/],
      [{ ...base, resource: "package", resource_id: 999999 }, 404, /package 999999 does not exist/],
      [{ ...base, resource: "package", permission: "shell" }, 422, /Shell permission is only applicable to devices/],
      [{ ...base, resource_id: undefined, resource_name: "lab" }, 422, /Named permissions/],
      [{ ...base, resource: "device_by_tag" }, 422, /resource_name/],
    ];
    for (const [body, status, pattern] of cases) {
      const res =
        typeof body === "string"
          ? await server.request("/api/v1/permissions", { method: "POST", token: admin(), body, headers: { "content-type": "application/json" } })
          : await grant(body);
      assert.equal(res.status, status, JSON.stringify(body));
      assert.match((await res.json()).error, pattern, JSON.stringify(body));
    }
    assert.deepEqual(await json(server.request("/api/v1/permissions", { token: server.token([], "val") })), [], "nothing was stored");
    await grantOk(base);
    const dup = await grant(base);
    assert.equal(dup.status, 409);
    assert.equal((await dup.json()).error, "Conflict while adding a permission");
    await grantOk({ user_id: "val", resource: "device_by_tag", resource_name: "t", permission: "shell" });
    assert.equal((await grant({ user_id: "val", resource: "device_by_tag", resource_name: "t", permission: "shell" })).status, 409);
  });

  test("get, delete and list: scopes and status codes", async () => {
    const { id } = await registerDevice(server);
    const mine = await grantOk({ user_id: "lister", resource: "device", resource_id: id, permission: "read" });
    const theirs = await grantOk({ user_id: "other", resource: "device", resource_id: id, permission: "read" });
    const lister = server.token([], "lister");

    assert.equal((await server.request(`/api/v1/permissions/${mine.id}`)).status, 401);
    assert.equal((await server.request(`/api/v1/permissions/${mine.id}`, { token: lister })).status, 403);
    assert.equal((await server.request(`/api/v1/permissions/${mine.id}`, { token: server.token(["admin_ro"]) })).status, 403);
    assert.equal((await server.request(`/api/v1/permissions/${mine.id}`, { token: admin() })).status, 200);
    assert.equal((await server.request("/api/v1/permissions/999999", { token: admin() })).status, 404);

    assert.equal((await server.request("/api/v1/permissions")).status, 401);
    const own = await json(server.request("/api/v1/permissions", { token: lister }));
    assert.deepEqual(ids(own), [mine.id], "a user without admin scopes lists only their own rows");
    const all = await json(server.request("/api/v1/permissions", { token: server.token(["admin_ro"]) }));
    assert.ok(ids(all).includes(mine.id) && ids(all).includes(theirs.id));
    const device = await registerDevice(server);
    assert.equal((await server.request("/api/v1/permissions", { token: device.token })).status, 401, "device tokens are not management tokens");

    assert.equal((await server.request(`/api/v1/permissions/${mine.id}`, { method: "DELETE", token: lister })).status, 403);
    const del = await server.request(`/api/v1/permissions/${mine.id}`, { method: "DELETE", token: admin() });
    assert.equal(del.status, 200);
    assert.deepEqual(await del.json(), {});
    assert.equal((await server.request(`/api/v1/permissions/${mine.id}`, { method: "DELETE", token: admin() })).status, 404);
    assert.deepEqual(await json(server.request("/api/v1/permissions", { token: lister })), []);
  });
});

describe("permission rules for a token without admin scopes (2.7)", () => {
  test("direct, group, tag and name permissions; 404 for hidden, 403 for writes; lists filtered", async () => {
    const user = "alice";
    const alice = server.token([], user);
    const d1 = (await registerDevice(server)).id;
    const d2 = (await registerDevice(server)).id;
    const d3 = (await registerDevice(server)).id;
    const d4dev = await registerDevice(server, { extra: { "svc.device.name": "bench-4" } });
    const d4 = d4dev.id;
    for (const [d, tag] of [[d3, "lab-x"], [d1, "shared"], [d4, "shared"]] as const) {
      assert.equal((await server.request(`/api/v2/devices/${d}/tag/${tag}`, { method: "POST", token: admin() })).status, 200);
    }
    const get = (path: string) => server.request(path, { token: alice });
    const visible = async () => ids(await json(get("/api/v2/devices")));

    // Nothing granted: an empty list, hidden objects are 404 like missing ones, writes 403.
    assert.deepEqual(await visible(), []);
    const hidden = await get(`/api/v2/devices/${d1}`);
    assert.equal(hidden.status, 404);
    assert.deepEqual(await hidden.json(), { error: "device does not exist" });
    assert.deepEqual(await (await get("/api/v2/devices/999999")).json(), { error: "device does not exist" });
    assert.equal((await get(`/api/v2/devices/${d1}/tags`)).status, 404);
    assert.deepEqual(await json(get("/api/v2/tags/shared")), []);
    for (const [method, path] of [
      ["DELETE", `/api/v2/devices/${d1}`],
      ["POST", `/api/v2/devices/${d1}/tag/mine`],
      ["DELETE", `/api/v2/devices/${d1}/tag/shared`],
      ["DELETE", "/api/v2/devices/999999"],
    ]) {
      const res = await server.request(path, { method, token: alice });
      assert.equal(res.status, 403, `${method} ${path}`);
      assert.deepEqual(await res.json(), { error: "insufficient permission to a resource" });
    }
    // The refused writes changed nothing.
    assert.deepEqual(await json(server.request(`/api/v2/devices/${d1}/tags`, { token: admin() })), ["shared"]);
    assert.equal((await server.request(`/api/v2/devices/${d1}`, { token: admin() })).status, 200);
    // No admin scope: v1, registrations and permission management are closed.
    for (const path of ["/api/v1/devices", "/api/v1/auth/pending", `/api/v1/devices/${d1}`]) assert.equal((await get(path)).status, 403, path);

    // 1. Direct read: visible, readable, still not writable.
    await grantOk({ user_id: user, resource: "device", resource_id: d1, permission: "read" });
    assert.deepEqual(await visible(), [d1]);
    assert.equal((await get(`/api/v2/devices/${d1}`)).status, 200);
    assert.deepEqual(await json(get(`/api/v2/devices/${d1}/tags`)), ["shared"]);
    assert.deepEqual(ids(await json(get("/api/v2/tags/shared"))), [d1], "devices by tag are filtered");
    assert.equal((await server.request(`/api/v2/devices/${d1}/tag/mine`, { method: "POST", token: alice })).status, 403);
    // Direct update: tags may change; delete still refused.
    await grantOk({ user_id: user, resource: "device", resource_id: d1, permission: "update" });
    assert.equal((await server.request(`/api/v2/devices/${d1}/tag/mine`, { method: "POST", token: alice })).status, 200);
    assert.equal((await server.request(`/api/v2/devices/${d1}/tag/mine`, { method: "DELETE", token: alice })).status, 200);
    assert.equal((await server.request(`/api/v2/devices/${d1}`, { method: "DELETE", token: alice })).status, 403);

    // 2./3. Through a group: read on the group reaches its devices and packages, with the same word only.
    const g = await json(server.request("/api/v2/groups", { method: "POST", token: admin(), json: { metadata: {}, priority: 5 } }));
    const pkg = await uploadOk(server, { token: admin() });
    const hiddenPkg = await uploadOk(server, { token: admin(), version: "v2" });
    assert.equal((await server.request(`/api/v2/groups/${g.id}/devices`, { method: "PATCH", token: admin(), json: { add: [d2], remove: [] } })).status, 200);
    assert.equal((await server.request(`/api/v2/groups/${g.id}/package`, { method: "POST", token: admin(), json: { packages: [pkg.id] } })).status, 200);
    assert.deepEqual(await json(get("/api/v2/groups")), []);
    assert.deepEqual(await json(get("/api/v1/packages")), []);
    assert.equal((await get(`/api/v1/packages/${pkg.id}`)).status, 404);
    await grantOk({ user_id: user, resource: "group", resource_id: g.id, permission: "read" });
    assert.deepEqual(await visible(), [d1, d2]);
    assert.equal((await get(`/api/v2/devices/${d2}`)).status, 200);
    assert.deepEqual(ids(await json(get("/api/v2/groups"))), [g.id]);
    assert.deepEqual(ids(await json(get("/api/v1/packages"))), [pkg.id]);
    assert.equal((await get(`/api/v1/packages/${pkg.id}`)).status, 200);
    assert.equal((await get(`/api/v1/packages/${hiddenPkg.id}`)).status, 404);
    assert.equal((await server.request(`/api/v2/devices/${d2}/tag/x`, { method: "POST", token: alice })).status, 403, "read on a group is not update");
    await grantOk({ user_id: user, resource: "group", resource_id: g.id, permission: "update" });
    assert.equal((await server.request(`/api/v2/devices/${d2}/tag/x`, { method: "POST", token: alice })).status, 200);
    // Leaving the group takes the propagated permissions away.
    assert.equal((await server.request(`/api/v2/groups/${g.id}/devices`, { method: "PATCH", token: admin(), json: { add: [], remove: [d2] } })).status, 200);
    assert.deepEqual(await visible(), [d1]);
    assert.equal((await get(`/api/v2/devices/${d2}`)).status, 404);

    // 4. Through a tag or a device name (device_by_tag).
    await grantOk({ user_id: user, resource: "device_by_tag", resource_name: "lab-x", permission: "read" });
    assert.deepEqual(await visible(), [d1, d3]);
    assert.deepEqual(ids(await json(get("/api/v2/tags/lab-x"))), [d3]);
    await grantOk({ user_id: user, resource: "device_by_tag", resource_name: "bench-4", permission: "read" });
    assert.deepEqual(await visible(), [d1, d3, d4]);
    assert.deepEqual(ids(await json(get("/api/v2/tags/shared"))), [d1, d4]);
    // Removing the tag removes what it granted.
    assert.equal((await server.request(`/api/v2/devices/${d3}/tag/lab-x`, { method: "DELETE", token: admin() })).status, 200);
    assert.deepEqual(await visible(), [d1, d4]);

    // Delete by name, then the cascade: the device's own rows go, named rows stay.
    await grantOk({ user_id: user, resource: "device_by_tag", resource_name: "bench-4", permission: "delete" });
    await grantOk({ user_id: user, resource: "device", resource_id: d4, permission: "update" });
    const before = await json(get("/api/v1/permissions"));
    assert.equal((await server.request(`/api/v2/devices/${d4}`, { method: "DELETE", token: alice })).status, 200);
    assert.equal((await server.request(`/api/v2/devices/${d4}`, { method: "DELETE", token: alice })).status, 403, "gone, and nothing to say about it");
    const afterDelete = await json(get("/api/v1/permissions"));
    assert.deepEqual(
      afterDelete.map((p: { id: number }) => p.id),
      before.filter((p: { resource: string; resource_id: number }) => !(p.resource === "device" && p.resource_id === d4)).map((p: { id: number }) => p.id),
    );
    assert.ok(afterDelete.some((p: { resource_name: string | null }) => p.resource_name === "bench-4"));

    // Another user sees none of it; admin_ro reads everything but writes nothing.
    const bob = server.token([], "bob");
    assert.deepEqual(await json(server.request("/api/v2/devices", { token: bob })), []);
    const ro = server.token(["admin_ro"], "reader");
    const all = ids(await json(server.request("/api/v2/devices", { token: ro })));
    assert.ok([d1, d2, d3].every((d) => all.includes(d)));
    assert.equal((await server.request(`/api/v2/devices/${d3}`, { token: ro })).status, 200);
    assert.equal((await server.request(`/api/v2/devices/${d3}/tag/x`, { method: "POST", token: ro })).status, 403);
    assert.equal((await server.request(`/api/v2/devices/${d3}`, { method: "DELETE", token: ro })).status, 403);
    assert.equal((await server.request("/api/v2/devices")).status, 401);
  });

  test("the creator of a group gets read, update and delete on it; deleting it drops its rows", async () => {
    const carol = server.token(["create_group"], "carol");
    const g = await json(server.request("/api/v2/groups", { method: "POST", token: carol, json: { metadata: {} } }));
    const rows = await json(server.request("/api/v1/permissions", { token: carol }));
    assert.deepEqual(
      rows.filter((p: { resource_id: number }) => p.resource_id === g.id).map((p: { permission: string }) => p.permission).sort(),
      ["delete", "read", "update"],
    );
    assert.equal((await server.request(`/api/v2/groups/${g.id}`, { token: carol })).status, 200);
    assert.equal((await server.request(`/api/v2/groups/${g.id}`, { method: "DELETE", token: carol })).status, 200);
    assert.deepEqual(await json(server.request("/api/v1/permissions", { token: carol })), []);
  });
});
