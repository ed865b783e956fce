import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import type { GroupV1 } from "../../src/update/groups/schema.ts";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

/** A group as either API version answers it (v1 has no priority). */
type Group = GroupV1 & { priority?: number };

describe("groups v2 and v1", () => {
  const server = useTestServer();
  let devices: number[] = [];
  const admin = () => server.adminToken;

  const create = async (body: unknown, token = admin()): Promise<Group> => {
    const res = await server.call("POST", "/api/v2/groups", body, token);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body as Group;
  };
  const get = async (id: number, version = "v2"): Promise<Group> => (await server.call("GET", `/api/${version}/groups/${id}`)).body as Group;
  const patch = (id: number, add: number[], remove: number[], version = "v2", token = admin()) => server.call("PATCH", `/api/${version}/groups/${id}/devices`, { add, remove }, token);
  const grant = async (user: string, resource: string, id: number, permission: string) => {
    const res = await server.call("POST", "/api/v1/permissions", { resource, resource_id: id, user_id: user, permission });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  };

  before(async () => {
    devices = [];
    for (let i = 0; i < 6; i++) devices.push((await registerDevice(server)).id);
  });

  it("creates a group with the defaults: no devices, no packages, policy no_update, priority 25", async () => {
    const group = await create({ metadata: { "svc.group.name": "lab A" } });
    assert.deepEqual(Object.keys(group).sort(), ["created", "devices", "id", "metadata", "packages", "policy", "priority"]);
    assert.deepEqual(group.devices, []);
    assert.deepEqual(group.packages, []);
    assert.equal(group.policy, "no_update,");
    assert.equal(group.priority, 25);
    assert.deepEqual(group.metadata, { "svc.group.name": "lab A" });
    assert.match(group.created, / GMT$/);
    const explicit = await create({ metadata: {}, priority: 3 });
    assert.equal(explicit.priority, 3);
    const twin = await create({ metadata: {}, priority: 3 });
    assert.equal(twin.priority, 3, "two groups may share a priority");
    assert.deepEqual(await get(group.id), group);
    const list = (await server.call("GET", "/api/v2/groups")).body as Group[];
    assert.ok(list.some((g) => g.id === group.id && g.priority === 25));
  });

  it("validates group creation and its access", async () => {
    for (const body of [{}, { metadata: null }, { metadata: [1] }, { metadata: "x" }, { metadata: {}, priority: "1.0" }, { metadata: {}, priority: 1.5 }]) {
      const res = await server.call("POST", "/api/v2/groups", body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(typeof res.body.error, "string");
    }
    const raw = await server.request("/api/v2/groups", { method: "POST", token: admin(), headers: { "content-type": "application/json" }, body: "{oops" });
    assert.equal(raw.status, 400);
    assert.equal((await server.call("POST", "/api/v2/groups", { metadata: {} }, "")).status, 401);
    assert.equal((await server.call("POST", "/api/v2/groups", { metadata: {} }, server.token(["admin_ro"], "ro"))).status, 403);
    assert.equal((await server.call("GET", "/api/v2/groups", undefined, "")).status, 401);
    assert.equal((await server.call("GET", "/api/v2/groups/999999")).status, 404);
    assert.equal((await server.call("GET", "/api/v2/groups/abc")).status, 404);
  });

  it("the creator of a group gets read, update and delete; other users see nothing", async () => {
    const carol = server.token(["create_group"], "carol");
    const dave = server.token(["create_group"], "dave");
    const group = await create({ metadata: { owner: "carol" } }, carol);
    assert.deepEqual(((await server.call("GET", "/api/v2/groups", undefined, carol)).body as Group[]).map((g) => g.id), [group.id]);
    assert.deepEqual((await server.call("GET", "/api/v2/groups", undefined, dave)).body, []);
    assert.equal((await server.call("GET", `/api/v2/groups/${group.id}`, undefined, dave)).status, 404);
    assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/policy`, { policy: "exact_match,v2" }, dave)).status, 403);
    assert.equal((await server.call("DELETE", `/api/v2/groups/${group.id}`, undefined, dave)).status, 403);
    assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/policy`, { policy: "exact_match,v2" }, carol)).status, 200);
    // admin_ro reads every v2 group but cannot change one.
    const ro = server.token(["admin_ro"], "auditor");
    assert.equal((await server.call("GET", `/api/v2/groups/${group.id}`, undefined, ro)).status, 200);
    assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/priority`, { priority: 7 }, ro)).status, 403);
    assert.equal((await server.call("DELETE", `/api/v2/groups/${group.id}`, undefined, carol)).status, 200);
    assert.deepEqual(await server.db.all("SELECT id FROM permissions WHERE resource = 'group' AND resource_id = ?", [group.id]), []);
  });

  it("validates and stores policies", async () => {
    const group = await create({ metadata: {} });
    for (const policy of ["exact_match,v2", "exact_match,", "no_update,", "exact_match,a,b"]) {
      assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/policy`, { policy })).status, 200, policy);
      assert.equal((await get(group.id)).policy, policy);
    }
    const cases: [unknown, RegExp][] = [
      [{ policy: "exact_match" }, /missing arguments/],
      [{ policy: "latest,v1" }, /invalid policy type: 'latest'/],
      [{ policy: 3 }, /policy/],
      [{}, /policy/],
      [{ policy: "no_update,", extra: 1 }, /unknown field/],
    ];
    for (const [body, message] of cases) {
      const res = await server.call("POST", `/api/v2/groups/${group.id}/policy`, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.match(res.body.error, message);
    }
    assert.equal((await get(group.id)).policy, "exact_match,a,b", "nothing changed by the refused requests");
    assert.equal((await server.call("POST", "/api/v2/groups/999999/policy", { policy: "no_update," })).status, 404);
  });

  it("PATCH devices: additions first, then removals; one invalid entry aborts everything (409)", async () => {
    const [d1, d2, d3] = devices;
    const g = await create({ metadata: { t: "patch" }, priority: 101 });
    const same = await create({ metadata: {}, priority: 101 });
    const other = await create({ metadata: {}, priority: 102 });

    assert.equal((await patch(g.id, [d1, d2], [])).status, 200);
    assert.deepEqual((await get(g.id)).devices, [d1, d2]);

    const unchanged = async () => {
      assert.deepEqual((await get(g.id)).devices, [d1, d2]);
      assert.deepEqual((await get(same.id)).devices, []);
    };
    // Unknown device id: invalid, the valid addition in the same request is not applied.
    let res = await patch(g.id, [d3, 999999], []);
    assert.equal(res.status, 409);
    assert.deepEqual((await get(g.id)).devices, [d1, d2]);
    // Adding a device that is already in the target (same priority, the target itself).
    res = await patch(g.id, [d1], []);
    assert.equal(res.status, 409);
    await unchanged();
    // Adding to another group of the same priority.
    res = await patch(same.id, [d2], []);
    assert.equal(res.status, 409);
    assert.match(res.body.error, /same priority/);
    await unchanged();
    // Removing a device that is not in the group (D3), together with a valid addition.
    res = await patch(g.id, [d3], [d3 + 1000]);
    assert.equal(res.status, 409);
    res = await patch(g.id, [d3], [devices[4]]);
    assert.equal(res.status, 409);
    await unchanged();
    // Additions first: an id in both lists is added, then removed.
    res = await patch(g.id, [d3], [d3, d1]);
    assert.equal(res.status, 200);
    assert.deepEqual((await get(g.id)).devices, [d2]);
    // A device may hold groups of different priorities.
    assert.equal((await patch(other.id, [d2], [])).status, 200);
    assert.deepEqual((await get(other.id)).devices, [d2]);
    const device = (await server.call("GET", `/api/v2/devices/${d2}`)).body as { groups: number[] };
    assert.deepEqual(device.groups, [g.id, other.id]);
    // Schema.
    for (const body of [{ add: [d1] }, { remove: [] }, { add: ["1.0"], remove: [] }, { add: [0], remove: [] }, { add: [], remove: [], x: 1 }, [1]]) {
      assert.equal((await server.call("PATCH", `/api/v2/groups/${g.id}/devices`, body)).status, 400, JSON.stringify(body));
    }
    assert.equal((await patch(999999, [d1], [])).status, 404);
    assert.deepEqual((await get(g.id)).devices, [d2]);
    // Clean up for the other tests.
    assert.equal((await patch(g.id, [], [d2])).status, 200);
    assert.equal((await patch(other.id, [], [d2])).status, 200);
  });

  it("priority changes: 409 when a device of the group holds another group with that priority", async () => {
    const [, , , d4] = devices;
    const a = await create({ metadata: {}, priority: 201 });
    const b = await create({ metadata: {}, priority: 202 });
    assert.equal((await patch(a.id, [d4], [])).status, 200);
    assert.equal((await patch(b.id, [d4], [])).status, 200);
    const res = await server.call("POST", `/api/v2/groups/${b.id}/priority`, { priority: 201 });
    assert.equal(res.status, 409);
    assert.equal((await get(b.id)).priority, 202, "unchanged after the 409");
    assert.equal((await server.call("POST", `/api/v2/groups/${b.id}/priority`, { priority: 202 })).status, 200, "same value again is fine");
    assert.equal((await server.call("POST", `/api/v2/groups/${b.id}/priority`, { priority: 5 })).status, 200);
    assert.equal((await get(b.id)).priority, 5);
    // A group without devices can take any priority.
    const empty = await create({ metadata: {} });
    assert.equal((await server.call("POST", `/api/v2/groups/${empty.id}/priority`, { priority: 201 })).status, 200);
    for (const body of [{}, { priority: "one" }, { priority: 1.5 }, { priority: 1, x: 2 }]) {
      assert.equal((await server.call("POST", `/api/v2/groups/${b.id}/priority`, body)).status, 400, JSON.stringify(body));
    }
    assert.equal((await server.call("POST", "/api/v2/groups/999999/priority", { priority: 1 })).status, 404);
    assert.equal((await patch(a.id, [], [d4])).status, 200);
    assert.equal((await patch(b.id, [], [d4])).status, 200);
  });

  it("package assignment replaces the set; unknown ids are 404; assigned packages cannot be deleted", async () => {
    const g = await create({ metadata: {} });
    const p1 = await uploadOk(server, { token: admin(), version: "v1" });
    const p2 = await uploadOk(server, { token: admin(), version: "v2" });
    const assign = (packages: unknown, id = g.id) => server.call("POST", `/api/v2/groups/${id}/package`, { packages });
    assert.equal((await assign([p2.id, p1.id])).status, 200);
    assert.deepEqual((await get(g.id)).packages, [p1.id, p2.id]);
    assert.equal((await assign([p2.id])).status, 200);
    assert.deepEqual((await get(g.id)).packages, [p2.id]);
    const missing = await assign([p1.id, 999999]);
    assert.equal(missing.status, 404);
    assert.deepEqual((await get(g.id)).packages, [p2.id], "unchanged after the 404");
    assert.equal((await assign([p1.id], 999999)).status, 404);
    for (const body of [{}, { packages: "1" }, { packages: [1.5] }, { packages: [], x: 1 }]) {
      assert.equal((await server.call("POST", `/api/v2/groups/${g.id}/package`, body)).status, 400, JSON.stringify(body));
    }
    // Delete while assigned: 409, the object stays.
    const file = join(server.dataDir, "storage", p2.metadata["svc.storage.local.uuid"] as string);
    const refused = await server.call("DELETE", `/api/v1/packages/${p2.id}`);
    assert.equal(refused.status, 409);
    assert.ok(existsSync(file));
    assert.equal((await server.call("GET", `/api/v1/packages/${p2.id}`)).status, 200);
    assert.equal((await assign([])).status, 200);
    assert.deepEqual((await get(g.id)).packages, []);
    assert.equal((await server.call("DELETE", `/api/v1/packages/${p2.id}`)).status, 200);
    assert.equal(existsSync(file), false);
  });

  it("deletes a group: 409 with devices, allowed with only packages (D5)", async () => {
    const [, , , , d5] = devices;
    const g = await create({ metadata: {} });
    const p = await uploadOk(server, { token: admin() });
    assert.equal((await server.call("POST", `/api/v2/groups/${g.id}/package`, { packages: [p.id] })).status, 200);
    assert.equal((await patch(g.id, [d5], [])).status, 200);
    const refused = await server.call("DELETE", `/api/v2/groups/${g.id}`);
    assert.equal(refused.status, 409);
    assert.deepEqual((await get(g.id)).devices, [d5]);
    assert.equal((await patch(g.id, [], [d5])).status, 200);
    const res = await server.call("DELETE", `/api/v2/groups/${g.id}`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {});
    assert.equal((await server.call("GET", `/api/v2/groups/${g.id}`)).status, 404);
    assert.equal((await server.call("DELETE", `/api/v2/groups/${g.id}`)).status, 404);
    // The assignment went with the group, so the package can go now.
    assert.equal((await server.call("DELETE", `/api/v1/packages/${p.id}`)).status, 200);
  });

  it("no escalation: adding a device or package to a group needs update on it, and what the group's holders would gain", async () => {
    const [, , , , , d6] = devices;
    const erin = server.token([], "erin");
    const g = await create({ metadata: {} });
    const p = await uploadOk(server, { token: admin() });
    await grant("erin", "group", g.id, "update");
    await grant("erin", "group", g.id, "read");
    assert.equal((await patch(g.id, [d6], [], "v2", erin)).status, 403);
    assert.equal((await server.call("POST", `/api/v2/groups/${g.id}/package`, { packages: [p.id] }, erin)).status, 403);
    assert.deepEqual((await get(g.id)).devices, []);
    await grant("erin", "device", d6, "update");
    await grant("erin", "package", p.id, "update");
    // erin reads the group: the addition would give her read on them, which she lacks (issue 10).
    assert.equal((await patch(g.id, [d6], [], "v2", erin)).status, 403);
    assert.equal((await server.call("POST", `/api/v2/groups/${g.id}/package`, { packages: [p.id] }, erin)).status, 403);
    await grant("erin", "device", d6, "read");
    await grant("erin", "package", p.id, "read");
    const added = await patch(g.id, [d6], [], "v2", erin);
    assert.equal(added.status, 200, JSON.stringify(added.body));
    assert.equal((await server.call("POST", `/api/v2/groups/${g.id}/package`, { packages: [p.id] }, erin)).status, 200);
    // Group read reaches the group's packages (and devices).
    const frank = server.token([], "frank");
    await grant("frank", "group", g.id, "read");
    assert.deepEqual(((await server.call("GET", "/api/v1/packages", undefined, frank)).body as { id: number }[]).map((x) => x.id), [p.id]);
    assert.equal((await server.call("GET", `/api/v2/devices/${d6}`, undefined, frank)).status, 200);
    assert.equal((await server.call("DELETE", `/api/v1/packages/${p.id}`, undefined, frank)).status, 403, "read does not give delete");
    // Removing is allowed with update on the group alone.
    assert.equal((await patch(g.id, [], [d6], "v2", erin)).status, 200);
    assert.equal((await server.call("POST", `/api/v2/groups/${g.id}/package`, { packages: [] }, erin)).status, 200);
  });

  it("v1: flat metadata body, no priority, admin scopes, one group per device", async () => {
    const [d1] = devices;
    const res = await server.call("POST", "/api/v1/groups", { "svc.group.name": "legacy", note: "x" });
    assert.equal(res.status, 200);
    const v1 = res.body as Group;
    assert.deepEqual(Object.keys(v1).sort(), ["created", "devices", "id", "metadata", "packages", "policy"]);
    assert.deepEqual(v1.metadata, { "svc.group.name": "legacy", note: "x" });
    assert.equal(v1.policy, "no_update,");
    assert.equal((await get(v1.id)).priority, 25, "v1 groups get the default priority");
    assert.equal("priority" in (await get(v1.id, "v1")), false);
    const list = (await server.call("GET", "/api/v1/groups")).body as Group[];
    assert.ok(list.length > 0 && list.every((g) => !("priority" in g)));
    assert.equal((await server.call("POST", "/api/v1/groups", [1, 2])).status, 400);

    // Access: reads need admin_ro or admin_rw, writes admin_rw; create_group is not enough.
    const ro = server.token(["admin_ro"], "ro1");
    const creator = server.token(["create_group"], "creator1");
    assert.equal((await server.call("GET", "/api/v1/groups", undefined, ro)).status, 200);
    assert.equal((await server.call("GET", `/api/v1/groups/${v1.id}`, undefined, ro)).status, 200);
    assert.equal((await server.call("GET", "/api/v1/groups", undefined, creator)).status, 403);
    assert.equal((await server.call("POST", "/api/v1/groups", {}, creator)).status, 403);
    assert.equal((await server.call("POST", "/api/v1/groups", {}, ro)).status, 403);
    assert.equal((await server.call("POST", `/api/v1/groups/${v1.id}/policy`, { policy: "no_update," }, ro)).status, 403);
    assert.equal((await server.call("GET", "/api/v1/groups", undefined, "")).status, 401);
    // No priority operation in v1.
    assert.equal((await server.call("POST", `/api/v1/groups/${v1.id}/priority`, { priority: 1 })).status, 404);

    // v1 PATCH: a device that has any group is refused, whatever the priorities (D2).
    const elsewhere = await create({ metadata: {}, priority: 301 });
    assert.equal((await patch(elsewhere.id, [d1], [])).status, 200);
    assert.equal((await patch(v1.id, [d1], [], "v1")).status, 409);
    assert.deepEqual((await get(v1.id, "v1")).devices, []);
    assert.equal((await patch(elsewhere.id, [], [d1])).status, 200);
    assert.equal((await patch(v1.id, [d1], [], "v1")).status, 200);
    assert.equal((await patch(v1.id, [d1], [], "v1")).status, 409, "already in this very group");
    assert.equal((await server.call("DELETE", `/api/v1/groups/${v1.id}`)).status, 409);
    assert.equal((await patch(v1.id, [], [d1], "v1")).status, 200);
    assert.equal((await server.call("POST", `/api/v1/groups/${v1.id}/policy`, { policy: "exact_match,v9" })).status, 200);
    assert.equal((await server.call("POST", `/api/v1/groups/${v1.id}/package`, { packages: [] })).status, 200);
    assert.equal((await server.call("DELETE", `/api/v1/groups/${v1.id}`)).status, 200);
    assert.equal((await server.call("GET", `/api/v1/groups/${v1.id}`)).status, 404);
  });
});
