import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { adminPassword, fromConsole, login, signIn } from "./helpers.ts";

interface User {
  name: string;
  scopes: string[];
  disabled: boolean;
  created: string;
  last_login: string | null;
}

describe("accounts: the users API", () => {
  const server = useTestServer();

  const users = async (token = server.adminToken) => (await (await server.request("/api/v1/users", { token })).json()) as User[];
  const add = (json: unknown, token = server.adminToken) => server.request("/api/v1/users", { method: "POST", token, json });
  const patch = (name: string, json: unknown, init: { token?: string; headers?: Record<string, string> } = { token: server.adminToken }) =>
    server.request(`/api/v1/users/${name}`, { method: "PATCH", json, ...init });
  const whoami = (cookie: string) => server.request("/api/whoami", { headers: { cookie } });

  test("admin_rw creates, admin_ro lists, anyone else is refused; bad input changes nothing", async () => {
    const [admin] = await users();
    assert.equal(admin.name, "admin");
    assert.equal(admin.disabled, false);
    assert.ok(admin.scopes.includes("svc_admin_rw"));
    assert.ok(!Number.isNaN(Date.parse(admin.created)));

    const res = await add({ name: "bob", password: "bob-password", scopes: ["svc_tests_rw", "create_group"] });
    assert.equal(res.status, 201);
    const bob = (await res.json()) as User;
    assert.deepEqual({ ...bob, created: "" }, { name: "bob", scopes: ["svc_create_group", "svc_tests_rw"], disabled: false, created: "", last_login: null });

    assert.equal((await server.request("/api/v1/users", { token: server.token(["admin_ro"]) })).status, 200);
    assert.equal((await server.request("/api/v1/users", { token: server.token(["tests_rw"]) })).status, 403);
    assert.equal((await server.request("/api/v1/users")).status, 401);
    assert.equal((await add({ name: "carol", password: "carol-password", scopes: [] }, server.token(["admin_ro"]))).status, 403);

    for (const [body, status] of [
      [{ name: "BOB", password: "another-password", scopes: [] }, 409],
      [{ name: "bad name", password: "long enough", scopes: [] }, 400],
      [{ name: "x".repeat(65), password: "long enough", scopes: [] }, 400],
      [{ name: "carol", password: "short", scopes: [] }, 400],
      [{ name: "carol", password: "long enough", scopes: ["svc_root"] }, 400],
      [{ name: "carol", password: "long enough" }, 400],
      [{ name: "carol", password: "long enough", scopes: [], admin: true }, 400],
    ] as const) {
      const refused = await add(body);
      assert.equal(refused.status, status, JSON.stringify(body));
      assert.ok(((await refused.json()) as { error: string }).error);
    }
    assert.deepEqual((await users()).map((u) => u.name), ["admin", "bob"]);
  });

  test("a login records last_login; the session has the account's scopes; PATCH scopes applies to the next login", async () => {
    const cookie = await signIn(server, "bob", "bob-password");
    const bob = (await users()).find((u) => u.name === "bob")!;
    assert.ok(bob.last_login && !Number.isNaN(Date.parse(bob.last_login)));
    assert.deepEqual(((await (await whoami(cookie)).json()) as { scopes: string[] }).scopes.sort(), ["svc_create_group", "svc_tests_rw"]);
    assert.equal((await server.request("/api/v1/users", { headers: { cookie } })).status, 403, "bob is no admin");

    const changed = await patch("bob", { scopes: ["svc_tests_ro"] });
    assert.equal(changed.status, 200);
    assert.deepEqual(((await changed.json()) as User).scopes, ["svc_tests_ro"]);
    const again = await signIn(server, "bob", "bob-password");
    assert.deepEqual(((await (await whoami(again)).json()) as { scopes: string[] }).scopes, ["svc_tests_ro"]);
  });

  test("disabling ends the account's sessions and refuses its logins with the usual 401; enabling does not revive old sessions", async () => {
    const cookie = await signIn(server, "bob", "bob-password");
    assert.equal((await whoami(cookie)).status, 200);
    const res = await patch("bob", { disabled: true });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as User).disabled, true);

    const refused = await whoami(cookie);
    assert.equal(refused.status, 401);
    assert.deepEqual(await refused.json(), { error: "session has ended" });
    const denied = await login(server, "bob", "bob-password");
    assert.equal(denied.status, 401);
    assert.deepEqual(await denied.json(), { error: "invalid username or password" });

    assert.equal((await patch("bob", { disabled: false })).status, 200);
    assert.equal((await whoami(cookie)).status, 401, "the old session stays ended");
    assert.equal((await whoami(await signIn(server, "bob", "bob-password"))).status, 200);
  });

  test("a new password ends the old sessions; the old password stops working", async () => {
    const cookie = await signIn(server, "bob", "bob-password");
    assert.equal((await patch("bob", { password: "new-bob-password" })).status, 200);
    assert.equal((await whoami(cookie)).status, 401);
    assert.equal((await login(server, "bob", "bob-password")).status, 401);
    assert.equal((await whoami(await signIn(server, "bob", "new-bob-password"))).status, 200);
  });

  test("409: an admin cannot disable themselves, and the last enabled admin_rw account stays; 404 for an unknown name", async () => {
    const cookie = await signIn(server, "admin", adminPassword(server));
    const self = await patch("admin", { disabled: true }, { headers: fromConsole(server, cookie) });
    assert.equal(self.status, 409);
    const last = await patch("admin", { scopes: ["svc_admin_ro"] }, { headers: fromConsole(server, cookie) });
    assert.equal(last.status, 409);
    assert.match(((await last.json()) as { error: string }).error, /last enabled account with admin_rw/);
    // A token (not a session) of another name disabling the last admin: refused too.
    assert.equal((await patch("admin", { disabled: true }, { token: server.token(["admin_rw"], "ops") })).status, 409);
    assert.equal((await patch("ghost", { disabled: true })).status, 404);
    assert.equal((await patch("bob", { disabled: "yes" })).status, 400);

    // With a second admin, the first may give up admin_rw.
    assert.equal((await add({ name: "carol", password: "carol-password", scopes: ["svc_admin_rw"] })).status, 201);
    const dropped = await patch("admin", { scopes: ["svc_admin_ro"] }, { headers: fromConsole(server, cookie) });
    assert.equal(dropped.status, 200);
    assert.deepEqual(((await dropped.json()) as User).scopes, ["svc_admin_ro"]);
    // The first admin token is admin's: it acts with admin's scopes now.
    assert.equal((await patch("carol", { disabled: true })).status, 403, "admin's token lost admin_rw with the account");
    const carol = { token: server.token(["admin_rw"], "carol") };
    assert.equal((await patch("carol", { disabled: true }, { token: server.token(["admin_rw"], "ops") })).status, 409, "carol is now the last admin");
    assert.equal((await patch("admin", { scopes: ["svc_admin_rw"] }, carol)).status, 200);
  });

  test("a cookie-authenticated change without this server's Origin is refused and changes nothing", async () => {
    const cookie = await signIn(server, "admin", adminPassword(server));
    const res = await patch("bob", { disabled: true }, { headers: { cookie } });
    assert.equal(res.status, 403);
    assert.equal((await users()).find((u) => u.name === "bob")!.disabled, false);
  });

  test("the account name is the user of per-user permissions: a session with a permission on one device sees only it", async () => {
    const one = await registerDevice(server);
    await registerDevice(server);
    assert.equal((await add({ name: "dave", password: "dave-password", scopes: [] })).status, 201);
    const perm = await server.request("/api/v1/permissions", {
      method: "POST",
      token: server.adminToken,
      json: { resource: "device", resource_id: one.id, user_id: "dave", permission: "read" },
    });
    assert.equal(perm.status, 200);
    const cookie = await signIn(server, "dave", "dave-password");
    const devices = (await (await server.request("/api/v2/devices", { headers: { cookie } })).json()) as Array<{ id: number }>;
    assert.deepEqual(devices.map((d) => d.id), [one.id]);
  });
});
