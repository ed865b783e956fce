/*
 * Issue 39, item 1: a deployment's `packages` join its group through the group's one assignment
 * path (src/update/groups/groups.ts, assignPackages): `update` on each package added, and no holder
 * of the group gains a permission the caller does not hold on it; refused as the group's package
 * route refuses, and nothing changes.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { seedDevices } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

const server = useTestServer();

async function grant(user_id: string, resource: string, resource_id: number, permission: string): Promise<void> {
  const res = await server.call("POST", "/api/v1/permissions", { user_id, resource, resource_id, permission });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

/** An admin's group with one device and no packages; `user` holds read and update on it. */
async function groupOf(user: string): Promise<number> {
  const [device] = await seedDevices(server, 1);
  const g = (await server.call<{ id: number }>("POST", "/api/v2/groups", { metadata: {} })).body.id;
  assert.equal((await server.call("PATCH", `/api/v2/groups/${g}/devices`, { add: [device!.id], remove: [] })).status, 200);
  await grant(user, "group", g, "read");
  await grant(user, "group", g, "update");
  return g;
}

const groupPackages = async (g: number) => (await server.call<{ packages: number[] }>("GET", `/api/v2/groups/${g}`)).body.packages;
const deploymentCount = async () => (await server.call("GET", "/api/v2/deployments")).headers.get("x-total-count");
const auditOf = async (g: number) => ((await server.call<Array<{ action: string }>>("GET", `/api/v1/audit?target=group:${g}`)).body).map((e) => e.action);

describe("a deployment's packages", () => {
  test("update on a group does not let a deployment assign someone else's package: refused as the group route, nothing changes, nothing leaks", async () => {
    const secret = await uploadOk(server, { token: server.adminToken, version: "secret-1", devtype: "board", file: Buffer.from("the admin's image") });
    const g = await groupOf("mallory");
    await grant("carol", "group", g, "read"); // another holder of the group
    const mallory = server.token([], "mallory");
    const carol = server.token([], "carol");
    const before = { count: await deploymentCount(), audit: await auditOf(g) };

    const viaGroup = await server.call("POST", `/api/v2/groups/${g}/package`, { packages: [secret.id] }, mallory);
    const viaDeployment = await server.call("POST", "/api/v2/deployments", { group: g, version: "secret-1", packages: [secret.id] }, mallory);
    assert.equal(viaGroup.status, 403, JSON.stringify(viaGroup.body));
    assert.deepEqual([viaDeployment.status, viaDeployment.body.error], [403, `field "packages": ${viaGroup.body.error}`]);
    // A package that does not exist is refused the same way (ids are sequential: no probing).
    const missing = await server.call("POST", "/api/v2/deployments", { group: g, version: "secret-1", packages: [secret.id + 1000] }, mallory);
    assert.equal(missing.status, 403, JSON.stringify(missing.body));

    assert.deepEqual(await groupPackages(g), []);
    assert.equal(await deploymentCount(), before.count, "no deployment was made");
    assert.deepEqual(await auditOf(g), before.audit, "no assignment was recorded");
    for (const token of [mallory, carol]) {
      assert.equal((await server.call("GET", `/api/v1/packages/${secret.id}`, undefined, token)).status, 404);
      assert.equal((await server.call("GET", `/api/v1/packages/${secret.id}/download`, undefined, token)).status, 404);
      assert.deepEqual((await server.call<unknown[]>("GET", "/api/v1/packages", undefined, token)).body, []);
    }
  });

  test("update on the package is not enough when the group's other holders would gain what the caller lacks; holding it, the deployment assigns (audited)", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "shared-1", devtype: "board", file: Buffer.from("shared image") });
    const g = await groupOf("erin");
    await grant("dave", "group", g, "delete"); // dave would gain delete on the package
    await grant("erin", "package", pkg.id, "read");
    await grant("erin", "package", pkg.id, "update");
    const erin = server.token([], "erin");
    const body = { group: g, version: "shared-1", packages: [pkg.id] };

    const viaGroup = await server.call("POST", `/api/v2/groups/${g}/package`, { packages: [pkg.id] }, erin);
    const refused = await server.call("POST", "/api/v2/deployments", body, erin);
    assert.equal(viaGroup.status, 403);
    assert.deepEqual([refused.status, refused.body.error], [403, `field "packages": ${viaGroup.body.error}`]);
    assert.match(refused.body.error, /would grant delete on package/);
    assert.deepEqual(await groupPackages(g), []);
    assert.equal((await server.call("DELETE", `/api/v1/packages/${pkg.id}`, undefined, server.token([], "dave"))).status, 403, "dave gained nothing");

    await grant("erin", "package", pkg.id, "delete");
    const created = await server.call("POST", "/api/v2/deployments", body, erin);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(await groupPackages(g), [pkg.id]);
    assert.deepEqual((await auditOf(g)).slice(0, 1), ["group.packages"]);
    assert.equal((await server.call("POST", `/api/v2/deployments/${created.body.id}/abort`, undefined, erin)).status, 200);
  });
});
