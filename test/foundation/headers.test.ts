/**
 * Headers every answer carries (issue 24): `X-Content-Type-Options: nosniff` on all of them, and
 * `Cache-Control: no-store` on the API's JSON (tokens, accounts, sessions) unless a route says
 * otherwise. HSTS over TLS is in test/ops/tls.test.ts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { adminPassword } from "../console/browser.ts";

const server = useTestServer();

test("JSON answers with tokens, accounts and sessions are no-store and nosniff; so are errors", async () => {
  const login = await server.request("/api/v1/auth/login", { method: "POST", json: { username: "admin", password: adminPassword(server.dataDir) } });
  assert.equal(login.status, 200);
  const answers = [
    login,
    await server.request("/api/whoami", { token: server.adminToken }),
    await server.request("/api/v1/users", { token: server.adminToken }),
    await server.request("/api/v1/users", { method: "POST", token: server.adminToken, json: { name: "tech", password: "secret-password", scopes: ["svc_tests_rw"] } }),
    await server.request("/api/whoami"),
    await server.request("/api/v1/nothing-here"),
    await server.request("/api/v1/auth/device", { method: "POST", json: { nope: true } }),
  ];
  for (const res of answers) {
    assert.equal(res.headers.get("cache-control"), "no-store", res.url);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff", res.url);
    assert.equal(res.headers.get("strict-transport-security"), null, "no HSTS over plain HTTP");
  }
});

test("files, the console and downloads are nosniff too and keep their own caching", async () => {
  const form = new FormData();
  form.append("file", new Blob(["tests:\n  base:\n  - sleep:\n      seconds: 0\n"]), "h.yml");
  assert.equal((await server.request("/api/v1/configs", { method: "POST", token: server.adminToken, body: form })).status, 200);
  const file = await server.request("/api/v1/configs/h.yml/file", { token: server.adminToken });
  assert.equal(file.status, 200);
  assert.equal(file.headers.get("x-content-type-options"), "nosniff");
  assert.equal(file.headers.get("cache-control"), "private, no-transform");
  const page = await server.request("/");
  assert.equal(page.headers.get("x-content-type-options"), "nosniff");
  assert.equal(page.headers.get("cache-control"), "no-cache");
});
