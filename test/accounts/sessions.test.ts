import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import WebSocket from "ws";
import { removeDir, requestAt, startTestServer, tempDir, useTestServer } from "../helpers/server.ts";
import { makeCert, trustingFetch } from "../helpers/tls.ts";
import { adminPassword, login, sessionCookie, signIn } from "./helpers.ts";

describe("accounts: console sessions", () => {
  const server = useTestServer();

  test("first start: account admin with every scope, its random password in admin.password (0600)", async () => {
    const file = join(server.dataDir, "admin.password");
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(server.server.adminPasswordFile, file);
    const password = adminPassword(server);
    assert.ok(password.length >= 16, "a long random password");
    const res = await login(server, "admin", password);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { kind: string; sub: string; scopes: string[]; expires: string };
    assert.equal(body.kind, "mgmt");
    assert.equal(body.sub, "admin");
    assert.ok(body.scopes.includes("svc_admin_rw") && body.scopes.includes("svc_tests_rw") && body.scopes.includes("svc_create_group"));
    const ttl = (Date.parse(body.expires) - Date.now()) / 1000;
    assert.ok(ttl > 28000 && ttl <= 28800, `session ttl 8 h by default, got ${ttl}`);
  });

  test("the cookie: HttpOnly, SameSite=Strict, Path=/, Max-Age of console.session_ttl, not Secure over plain HTTP", async () => {
    const res = await login(server, "admin", adminPassword(server));
    const line = res.headers.getSetCookie().find((c) => c.startsWith("labgate_session="))!;
    const attributes = line.split(/;\s*/).slice(1).map((a) => a.toLowerCase());
    assert.ok(attributes.includes("httponly"), line);
    assert.ok(attributes.includes("samesite=strict"), line);
    assert.ok(attributes.includes("path=/"), line);
    assert.ok(attributes.includes("max-age=28800"), line);
    assert.ok(!attributes.includes("secure"), line);
  });

  test("wrong password, unknown name, malformed body: one 401 text for the first two, 400 for the last", async () => {
    for (const [name, password] of [
      ["admin", "not the password"],
      ["nobody", "whatever1"],
      ["no such name!", "whatever1"],
    ]) {
      const res = await login(server, name, password);
      assert.equal(res.status, 401);
      assert.deepEqual(await res.json(), { error: "invalid username or password" });
      assert.equal(sessionCookie(res), undefined, "no cookie on a failure");
    }
    const bad = await server.request("/api/v1/auth/login", { method: "POST", json: { username: "admin" } });
    assert.equal(bad.status, 400);
    const extra = await server.request("/api/v1/auth/login", { method: "POST", json: { username: "admin", password: "x", remember: true } });
    assert.equal(extra.status, 400);
  });

  test("the cookie authenticates wherever a token does; an Authorization header wins over it", async () => {
    const cookie = await signIn(server, "admin", adminPassword(server));
    const who = await server.request("/api/whoami", { headers: { cookie } });
    assert.equal(who.status, 200);
    assert.equal(((await who.json()) as { sub: string }).sub, "admin");
    assert.equal((await server.request("/api/v2/devices", { headers: { cookie } })).status, 200);
    assert.equal((await server.request("/api/v1/configs", { headers: { cookie } })).status, 200);
    const stream = new AbortController();
    const events = await server.request("/api/stream", { headers: { cookie }, signal: stream.signal });
    assert.equal(events.status, 200, "the live event stream");
    assert.match(events.headers.get("content-type") ?? "", /^text\/event-stream/);
    stream.abort();
    await events.body?.cancel().catch(() => {});

    const tester = server.token(["tests_ro"], "tester");
    const both = await server.request("/api/whoami", { headers: { cookie }, token: tester });
    assert.equal(((await both.json()) as { sub: string }).sub, "tester");

    assert.equal((await server.request("/api/whoami")).status, 401, "no cookie, no token");
    assert.equal((await server.request("/api/whoami", { headers: { cookie: "labgate_session=garbage" } })).status, 401);
  });

  test("CSRF: a cookie-authenticated change needs this server's Origin (or Referer); a token-authenticated one does not", async () => {
    const cookie = await signIn(server, "admin", adminPassword(server));
    const group = (headers: Record<string, string>, token?: string) =>
      server.request("/api/v2/groups", { method: "POST", json: { metadata: { name: "csrf" } }, headers, token });
    const refused: Array<Record<string, string>> = [{ cookie }, { cookie, origin: "http://evil.example" }, { cookie, referer: "http://evil.example/page" }, { cookie, origin: "null" }];
    for (const headers of refused) {
      const res = await group(headers);
      assert.equal(res.status, 403, JSON.stringify(headers));
      assert.deepEqual(await res.json(), { error: "cross-site request refused" });
    }
    // A port that differs is another origin.
    const url = new URL(server.url);
    const otherPort = await group({ cookie, origin: `http://${url.hostname}:${Number(url.port) + 1}` });
    assert.equal(otherPort.status, 403);
    assert.equal((await server.request("/api/v2/groups", { headers: { cookie } })).status, 200, "reading needs no Origin");

    assert.equal((await group({ cookie, origin: server.url })).status, 200, "same origin");
    assert.equal((await group({ cookie, referer: `${server.url}/groups` })).status, 200, "same-origin Referer without Origin");
    assert.equal((await group({}, server.adminToken)).status, 200, "a token needs no Origin");
    const names = ((await (await server.request("/api/v2/groups", { token: server.adminToken })).json()) as Array<{ metadata: { name: string } }>).filter(
      (g) => g.metadata.name === "csrf",
    );
    assert.equal(names.length, 3, "the refused requests changed nothing");
  });

  test("CSRF: a cookie-authenticated WebSocket upgrade from another origin is refused", async () => {
    const cookie = await signIn(server, "admin", adminPassword(server));
    const wsUrl = server.url.replace(/^http/, "ws") + "/api/v1/devices/00:11:22:33:44:55/shell";
    const status = (origin: string) =>
      new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(wsUrl, { headers: { cookie, origin } });
        ws.once("unexpected-response", (_req, res) => {
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.once("open", () => {
          resolve(101);
          ws.close();
        });
        ws.once("error", (error) => (error.message.includes("Unexpected server response") ? undefined : reject(error)));
      });
    assert.equal(await status("http://evil.example"), 403);
    assert.equal(await status(server.url), 101, "same origin: upgraded (then closed: the device is unknown)");
  });

  test("a cross-site login or logout is refused; logout clears the cookie", async () => {
    const cross = await login(server, "admin", adminPassword(server), { origin: "http://evil.example" });
    assert.equal(cross.status, 403);
    assert.equal(sessionCookie(cross), undefined);

    const crossOut = await server.request("/api/v1/auth/logout", { method: "POST", headers: { origin: "http://evil.example" } });
    assert.equal(crossOut.status, 403);
    assert.equal(sessionCookie(crossOut), undefined);

    const res = await server.request("/api/v1/auth/logout", { method: "POST" });
    assert.equal(res.status, 204);
    const line = res.headers.getSetCookie().find((c) => c.startsWith("labgate_session="))!;
    const parts = line.split(/;\s*/).map((a) => a.toLowerCase());
    assert.equal(parts[0], "labgate_session=");
    for (const attribute of ["max-age=0", "path=/", "httponly", "samesite=strict"]) assert.ok(parts.includes(attribute), line);
  });
});

describe("accounts: sessions over TLS", () => {
  const dir = tempDir("labgate-accounts-tls-");
  after(() => removeDir(dir));

  test("the cookie is Secure when the server speaks HTTPS; console.session_ttl sets its Max-Age", async () => {
    const cert = makeCert(dir, "server");
    const server = await startTestServer({ tls: { cert_file: cert.cert, key_file: cert.key }, console: { session_ttl: 600 } });
    server.request = requestAt(server.url, trustingFetch(cert.cert));
    try {
      const res = await login(server, "admin", adminPassword(server));
      assert.equal(res.status, 200);
      const line = res.headers.getSetCookie().find((c) => c.startsWith("labgate_session="))!;
      const attributes = line.split(/;\s*/).slice(1).map((a) => a.toLowerCase());
      assert.ok(attributes.includes("secure"), line);
      assert.ok(attributes.includes("max-age=600"), line);
      const who = await server.request("/api/whoami", { headers: { cookie: sessionCookie(res)! } });
      assert.equal(who.status, 200);
    } finally {
      await server.close();
      removeDir(server.dataDir);
    }
  });
});
