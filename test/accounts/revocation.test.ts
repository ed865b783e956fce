/*
 * Issue 10 item 6: management tokens carry an id and can be revoked (by id or by user, API and
 * CLI), effective on the next request; long-lived streams end with their token; disabling an
 * account revokes its tokens; logout revokes its session; the first admin token is short-lived.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { removeDir, startTestServer, tempDir, useTestServer, type TestServer } from "../helpers/server.ts";
import { runCli } from "../helpers/cli.ts";
import { openStream } from "../helpers/events.ts";
import { adminPassword, fromConsole, signIn } from "./helpers.ts";
import { registerDevice } from "../update/helpers/devices.ts";

const whoami = (server: TestServer, token: string) => server.request("/api/whoami", { token });
const tokenId = async (server: TestServer, token: string): Promise<string> => ((await (await whoami(server, token)).json()) as { id: string }).id;
const revoke = (server: TestServer, json: unknown, token = server.adminToken) => server.request("/api/v1/tokens/revoke", { method: "POST", token, json });

/** A JWT's claims, unverified. */
const claims = (token: string): Record<string, unknown> => JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));

describe("token revocation", () => {
  const server = useTestServer();

  test("every token's iat and exp are whole seconds (management, console session, first admin, device)", async () => {
    const session = (await signIn(server, "admin", adminPassword(server))).replace(/^labgate_session=/, "");
    const first = readFileSync(join(server.dataDir, "admin.token"), "utf8").trim();
    server.clock.advance(123.4); // not on a second boundary
    const { token: device } = await registerDevice(server);
    for (const [what, token] of Object.entries({ management: server.token(["admin_ro"], "rita"), session, first, device })) {
      const { iat, exp } = claims(token);
      assert.ok(Number.isInteger(iat) && Number.isInteger(exp), `${what}: iat ${iat}, exp ${exp}`);
      assert.ok((exp as number) > (iat as number), what);
    }
  });

  test("a revocation by user ends tokens issued earlier in the same second, not those issued after it", async () => {
    server.clock.freeze(); // the revocation's request may take longer than the rest of the second
    try {
      server.clock.advance(1000 - (server.clock.now() % 1000) + 100); // 100 ms into a second
      const before = server.token(["admin_ro"], "sam");
      server.clock.advance(100);
      assert.equal((await revoke(server, { user: "sam" })).status, 200);
      server.clock.advance(100);
      const after = server.token(["admin_ro"], "sam");
      assert.equal(claims(before).iat, claims(after).iat, "both issued in one second");
      assert.equal((await whoami(server, before)).status, 401);
      assert.equal((await whoami(server, after)).status, 200);
    } finally {
      server.clock.thaw();
    }
  });

  test("every token has an id; revoking it refuses it on the next request, cached or not", async () => {
    const first = server.token(["admin_ro"], "rita");
    const second = server.token(["admin_ro"], "rita");
    const id = await tokenId(server, first);
    assert.match(id, /^[\w-]{16,}$/);
    assert.notEqual(id, await tokenId(server, second));
    assert.equal((await server.request("/api/v1/devices", { token: first })).status, 200, "verified and cached");
    assert.equal((await revoke(server, { id })).status, 200);
    const refused = await server.request("/api/v1/devices", { token: first });
    assert.equal(refused.status, 401);
    assert.deepEqual(await refused.json(), { error: "token has been revoked" });
    assert.equal((await whoami(server, second)).status, 200, "the user's other token is untouched");
    assert.equal((await revoke(server, { id })).status, 200, "idempotent");
  });

  test("revoking a user ends every token issued until now; later ones work", async () => {
    const a = server.token([], "ulla");
    const b = server.token(["tests_ro"], "ulla");
    const other = server.token([], "victor");
    assert.equal((await revoke(server, { user: "ulla" })).status, 200);
    assert.equal((await whoami(server, a)).status, 401);
    assert.equal((await whoami(server, b)).status, 401);
    assert.equal((await whoami(server, other)).status, 200);
    assert.equal((await whoami(server, server.token([], "ulla"))).status, 200, "issued after the revocation");
  });

  test("the revocation API: admin_rw only, exactly one of id and user", async () => {
    assert.equal((await revoke(server, { user: "x" }, server.token(["admin_ro"], "ro"))).status, 403);
    assert.equal((await server.request("/api/v1/tokens/revoke", { method: "POST", json: { user: "x" } })).status, 401);
    for (const body of [{}, { id: "a", user: "b" }, { id: "" }, { user: 5 }, { id: "a", extra: 1 }, []]) {
      const res = await revoke(server, body);
      assert.equal(res.status, 400, JSON.stringify(body));
    }
  });

  test("an event stream ends when its token is revoked, and when it expires", async () => {
    const token = server.token(["admin_ro"], "sse-user");
    const stream = await openStream(server, token);
    assert.equal(stream.status, 200);
    assert.equal((await revoke(server, { id: await tokenId(server, token) })).status, 200);
    assert.match(await stream.ended, /^: token has been revoked$/m);

    const short = server.token(["admin_ro"], "sse-user", 60);
    const expiring = await openStream(server, short);
    assert.equal(expiring.status, 200);
    server.clock.advance(61_000);
    assert.match(await expiring.ended, /^: token has expired$/m);
  });

  test("disabling an account revokes tokens issued for its name; logout revokes the session", async () => {
    assert.equal((await server.request("/api/v1/users", { method: "POST", token: server.adminToken, json: { name: "dora", password: "dora-password", scopes: ["svc_admin_ro"] } })).status, 201);
    const issued = server.token(["admin_ro"], "dora");
    assert.equal((await whoami(server, issued)).status, 200);
    const disable = await server.request("/api/v1/users/dora", { method: "PATCH", token: server.adminToken, json: { disabled: true } });
    assert.equal(disable.status, 200);
    assert.equal((await whoami(server, issued)).status, 401);
    assert.equal((await server.request("/api/v1/users/dora", { method: "PATCH", token: server.adminToken, json: { disabled: false } })).status, 200);
    assert.equal((await whoami(server, issued)).status, 401, "enabling again does not bring old tokens back");

    const cookie = await signIn(server, "admin", adminPassword(server));
    const headers = fromConsole(server, cookie);
    assert.equal((await server.request("/api/whoami", { headers })).status, 200);
    assert.equal((await server.request("/api/v1/auth/logout", { method: "POST", headers })).status, 204);
    const after = await server.request("/api/whoami", { headers });
    assert.equal(after.status, 401, "the cookie value kept after logout is dead on the server too");
  });
});

describe("admin token lifetime and labgate token revoke", () => {
  test("the first start's admin token lasts console.admin_token_ttl (default 7 days)", async () => {
    for (const [patch, seconds] of [[{}, 7 * 86400], [{ console: { admin_token_ttl: 3600 } }, 3600]] as const) {
      const server = await startTestServer(patch);
      try {
        const token = readFileSync(join(server.dataDir, "admin.token"), "utf8").trim();
        const { expires } = (await (await whoami(server, token)).json()) as { expires: string };
        const left = (Date.parse(expires) - Date.now()) / 1000;
        assert.ok(left > seconds - 60 && left <= seconds, `${left} s`);
      } finally {
        await server.close();
        removeDir(server.dataDir);
      }
    }
  });

  test("labgate token revoke: with the server stopped (database) and while it runs (its API)", async () => {
    const dir = tempDir();
    const data = join(dir, "data");
    const issue = async (user: string) => {
      const res = await runCli(["token", "issue", "--user", user, "--scopes", "svc_admin_ro", "--data-dir", data]);
      assert.equal(res.code, 0, res.stderr);
      const id = /token id (\S+)/.exec(res.stderr)?.[1];
      assert.ok(id, res.stderr);
      return { token: res.stdout.trim(), id };
    };
    // The server runs in-process: what is tested is the CLI, on the data dir or through the server's API.
    let server = await startTestServer({}, data);
    const get = (token: string) => whoami(server, token);
    try {
      const one = await issue("carl");
      const two = await issue("carl");
      const three = await issue("erna");
      assert.equal((await get(one.token)).status, 200);
      const byId = await runCli(["token", "revoke", "--id", one.id, "--data-dir", data]);
      assert.equal(byId.code, 0, byId.stderr);
      assert.equal((await get(one.token)).status, 401);
      assert.equal((await get(two.token)).status, 200);
      await server.close();
      const byUser = await runCli(["token", "revoke", "--user", "carl", "--data-dir", data]);
      assert.equal(byUser.code, 0, byUser.stderr);
      server = await startTestServer({}, data);
      assert.equal((await get(two.token)).status, 401);
      assert.equal((await get(three.token)).status, 200);
      const usage = await runCli(["token", "revoke", "--data-dir", data]);
      assert.equal(usage.code, 2);
    } finally {
      await server.close();
      removeDir(dir);
    }
  });
});
