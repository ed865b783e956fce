/**
 * What a plain-HTTP server loads of Node (issue 31, idle memory): not Node's undici (the server
 * answers with its own Fetch classes, src/http/web/), nor http2, tls or https (src/server/bundle.ts:
 * stand-ins in its bundle; its own TLS loads them when configured, test/ops/tls.test.ts).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { labgate, startServe } from "../helpers/cli.ts";
import { tempDir } from "../helpers/server.ts";
import * as noHttp2 from "../../src/http/web/no-http2.ts";

test("@hono/node-server takes from node:http2 only what the server bundle's stand-in has", () => {
  const source = readFileSync(fileURLToPath(import.meta.resolve("@hono/node-server")), "utf8");
  const imports = [...source.matchAll(/import\s*\{([^}]*)\}\s*from\s*"(?:node:)?http2"/g)].flatMap((m) => m[1]!.split(",").map((name) => name.trim().split(/\s+as\s+/)[0]!));
  assert.deepEqual(imports.sort(), Object.keys(noHttp2).sort());
  const constants = [...new Set([...source.matchAll(/\bconstants\.(\w+)/g)].map((m) => m[1]!))];
  assert.deepEqual(constants, Object.keys(noHttp2.constants));
});

test("a serving server, asked for its health, its OpenAPI document, a list and a refused body, has loaded neither undici nor http2, tls or https", async () => {
  const dir = tempDir("labgate-server-modules-");
  const list = join(dir, "loaded.txt");
  const [node, bundle] = await labgate();
  const fixture = fileURLToPath(new URL("../fixtures/module-list.cjs", import.meta.url));
  const server = await startServe(["serve", "--data-dir", join(dir, "data"), "--listen", "127.0.0.1:0"], { command: [node!, "--require", fixture, bundle!], env: { LABGATE_MODULE_LIST: list } });
  try {
    const token = readFileSync(join(dir, "data", "admin.token"), "utf8").trim();
    assert.equal((await fetch(`${server.url}/api/health`)).status, 200);
    assert.equal((await fetch(`${server.url}/api/openapi.json`)).status, 200);
    assert.equal((await fetch(`${server.url}/api/v2/devices`, { headers: { authorization: `Bearer token=${token}` } })).status, 200);
    const refused = await fetch(`${server.url}/api/v2/groups`, { method: "POST", headers: { authorization: `Bearer token=${token}`, "content-type": "application/json" }, body: "{not json" });
    assert.equal(refused.status, 400);
  } finally {
    assert.equal(await server.stop(), 0);
  }
  const loaded = readFileSync(list, "utf8").split("\n").map((line) => line.replace(/^NativeModule /, ""));
  assert.ok(loaded.includes("http") && loaded.includes("crypto"), "the list is of a server that answered");
  assert.deepEqual(loaded.filter((name) => ["internal/deps/undici/undici", "http2", "tls", "https"].includes(name)), []);
});
