/**
 * Headers every answer carries (issue 24): `X-Content-Type-Options: nosniff` on all of them, and
 * `Cache-Control: no-store` on the API's JSON (tokens, accounts, sessions) unless a route says
 * otherwise; one Date header, which the server writes itself (src/server/date-header.ts). HSTS over
 * TLS is in test/ops/tls.test.ts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { request as httpRequest } from "node:http";
import { httpDate } from "../../src/server/date-header.ts";
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

test("every answer carries one Date header, the text Node's own would be (toUTCString), of the time it answered", async () => {
  for (const path of ["/api/health", "/api/v1/nothing-here", "/"]) {
    const before = Math.floor(Date.now() / 1000) * 1000;
    // node:http, not fetch, to see every header line as it came.
    const raw = await new Promise<string[]>((resolve, reject) => {
      httpRequest(`${server.url}${path}`, (res) => {
        res.resume();
        resolve(res.rawHeaders);
      }).on("error", reject).end();
    });
    const dates = raw.flatMap((value, i) => (i % 2 === 1 && raw[i - 1].toLowerCase() === "date" ? [value] : []));
    assert.equal(dates.length, 1, `${path}: ${JSON.stringify(raw)}`);
    const at = Date.parse(dates[0]);
    assert.equal(dates[0], new Date(at).toUTCString(), path);
    assert.ok(at >= before && at <= Date.now(), `${path}: ${dates[0]}`);
  }
  for (let ms = Date.UTC(1970, 0, 1); ms < Date.UTC(9999, 0, 1); ms += 86_399_937 * 97) assert.equal(httpDate(ms), new Date(Math.floor(ms / 1000) * 1000).toUTCString(), String(ms));
});
