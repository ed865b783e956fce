import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "./helpers/devices.ts";
import { upload, uploadOk } from "./helpers/packages.ts";

/**
 * Hostile input on every route of update-server.md sections 1-10 and 14: nothing answers 5xx,
 * nothing is logged as a server error, and refused requests store nothing.
 */
describe("update server: hostile input never gives a 5xx", () => {
  const server = useTestServer();
  /** Lines the server logged as errors or warnings (a 5xx is logged as a warning). */
  const logged: string[] = [];

  before(async () => {
    const log = server.server.ctx.log;
    log.error = (line: string) => void logged.push(`ERROR ${line}`);
    log.warn = (line: string) => void logged.push(`WARN ${line}`);
  });

  const packageCount = async () => (await server.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM packages"))?.n ?? 0;
  const storedObjects = (): string[] => {
    const out: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        if (entry.isDirectory()) walk(join(dir, entry.name));
        else out.push(join(dir, entry.name));
      }
    };
    walk(join(server.dataDir, "storage"));
    return out;
  };
  const uploadForm = (fields: [string, string][]) => {
    const form = new FormData();
    form.set("svc.software.version", "v1");
    form.set("svc.hardware.devtype", "board");
    for (const [key, value] of fields) form.append(key, value);
    form.set("file", new Blob([new Uint8Array(Buffer.from("bytes"))]), "pkg.bin");
    return server.request("/api/v1/packages", { method: "POST", token: server.adminToken, body: form });
  };

  it("a storage directory that names an existing object is a 400, and nothing is stored", async () => {
    const first = await uploadOk(server, { token: server.adminToken });
    const taken = first.metadata["svc.storage.local.uuid"] as string;
    const rows = await packageCount();
    const objects = storedObjects().length;
    for (const dir of [taken, `${taken}/below`]) {
      const res = await upload(server, { token: server.adminToken, fields: { "svc.storage.directory": dir } });
      assert.equal(res.status, 400, dir);
      assert.match(((await res.json()) as { error: string }).error, /svc\.storage\.directory.*existing object/);
    }
    assert.equal(await packageCount(), rows);
    assert.equal(storedObjects().length, objects);
    // The object that carries the name is untouched and still downloads.
    const link = (await (await server.request(`/api/v1/packages/${first.id}/download`, { token: server.adminToken })).json()) as { download_url: string };
    assert.equal(await (await fetch(link.download_url)).text(), "hello package");
  });

  it("too many or too large form fields are a 400, never silently dropped metadata", async () => {
    const rows = await packageCount();
    const objects = storedObjects().length;
    const many = await uploadForm(Array.from({ length: 1001 }, (_, i) => [`k${i}`, "v"] as [string, string]));
    assert.equal(many.status, 400);
    assert.match(((await many.json()) as { error: string }).error, /too many form fields/);
    const big = await uploadForm(Array.from({ length: 20 }, (_, i) => [`k${i}`, "x".repeat(60 * 1024)] as [string, string]));
    assert.equal(big.status, 400);
    assert.match(((await big.json()) as { error: string }).error, /larger than \d+ bytes in total/);
    assert.equal(await packageCount(), rows);
    assert.equal(storedObjects().length, objects);
    // Under both limits everything is kept, including keys that are special in JavaScript.
    const fine = await uploadForm([["__proto__", "p"], ["constructor", "c"], ["note", "x".repeat(60 * 1024)]]);
    assert.equal(fine.status, 200);
    const { metadata } = (await fine.json()) as { metadata: Record<string, unknown> };
    assert.equal(Object.hasOwn(metadata, "__proto__"), true);
    assert.equal(metadata["__proto__"], "p");
    assert.equal(metadata.constructor, "c");
  });

  it("a form part without a name or truncated mid-part is a 400, and the server keeps serving", async () => {
    const rows = await packageCount();
    const objects = storedObjects().length;
    const bodies = [
      "--BB\r\nContent-Disposition: form-data\r\n\r\nxyz\r\n--BB--\r\n",
      '--BB\r\nContent-Disposition: form-data; name=""\r\n\r\nxyz\r\n--BB--\r\n',
      '--BB\r\nContent-Disposition: form-data; filename="a.bin"\r\n\r\nxyz\r\n--BB--\r\n',
      '--BB\r\nContent-Disposition: form-data; name="other"; filename="a.bin"\r\n\r\nxyz',
      '--BB\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n\r\nxyz',
    ];
    for (const body of bodies) {
      const res = await server.request("/api/v1/packages", {
        method: "POST",
        token: server.adminToken,
        headers: { "content-type": "multipart/form-data; boundary=BB" },
        body,
      });
      assert.equal(res.status, 400, body);
      assert.equal(typeof ((await res.json()) as { error: string }).error, "string");
    }
    assert.equal((await server.request("/api/health")).status, 200);
    assert.equal(await packageCount(), rows);
    assert.equal(storedObjects().length, objects);
  });

  it("odd ids, bodies, names and tokens on every route: 4xx with a JSON error, no 5xx, nothing logged", async () => {
    const device = await registerDevice(server);
    const pkg = await uploadOk(server, { token: server.adminToken });
    const group = (await (await server.request("/api/v2/groups", { method: "POST", token: server.adminToken, json: { metadata: {} } })).json()) as { id: number };
    logged.length = 0;
    const before = {
      groups: JSON.stringify(await (await server.request(`/api/v2/groups/${group.id}`, { token: server.adminToken })).json()),
      device: JSON.stringify(await (await server.request(`/api/v1/devices/${device.id}`, { token: server.adminToken })).json()),
    };
    const failures: string[] = [];
    const probe = async (method: string, path: string, init: { json?: unknown; body?: string; type?: string; token?: string } = {}) => {
      const headers: Record<string, string> = init.type ? { "content-type": init.type } : {};
      const res = await server.request(path, {
        method,
        token: init.token ?? server.adminToken,
        ...(init.json !== undefined ? { json: init.json } : { body: init.body, headers }),
      });
      const text = await res.text();
      if (res.status >= 500) failures.push(`${res.status} ${method} ${path} ${JSON.stringify(init.json ?? init.body)}: ${text}`);
      if (res.status >= 400 && !(typeof JSON.parse(text || "{}").error === "string")) failures.push(`no JSON error: ${res.status} ${method} ${path}`);
      return res.status;
    };

    for (const id of ["abc", "0", "-1", "1.5", "1e3", "0x10", "99999999999999999999", "9007199254740993", "%00", "%2e%2e%2f1"]) {
      for (const path of [
        `/api/v1/packages/${id}`,
        `/api/v1/packages/${id}/download`,
        `/api/v2/groups/${id}`,
        `/api/v1/groups/${id}`,
        `/api/v2/devices/${id}`,
        `/api/v1/devices/${id}`,
        `/api/v2/devices/${id}/tags`,
        `/api/v2/devices/${id}/progress`,
        `/api/v1/permissions/${id}`,
      ]) {
        const status = await probe("GET", path);
        assert.ok(status === 404 || status === 400, `${path}: ${status}`);
      }
      for (const path of [`/api/v1/packages/${id}`, `/api/v2/groups/${id}`, `/api/v1/groups/${id}`, `/api/v2/devices/${id}`, `/api/v1/devices/${id}`, `/api/v1/permissions/${id}`]) {
        assert.equal(await probe("DELETE", path), 404, path);
      }
      await probe("POST", `/api/v2/groups/${id}/priority`, { json: { priority: 1 } });
      await probe("POST", `/api/v2/groups/${id}/policy`, { json: { policy: "no_update," } });
      await probe("POST", `/api/v2/groups/${id}/package`, { json: { packages: [] } });
      await probe("PATCH", `/api/v2/groups/${id}/devices`, { json: { add: [], remove: [] } });
      await probe("POST", `/api/v2/devices/${id}/tag/x`);
    }

    const bodies: unknown[] = [
      null, [], "x", 5, true, {}, { x: 1 },
      { add: "1", remove: [] }, { add: [1e300], remove: [] }, { add: [-1], remove: [] }, { add: [2 ** 53], remove: [] }, { add: [null], remove: [] },
      { packages: [1e300] }, { packages: null }, { packages: {} }, { policy: 5 }, { policy: "x".repeat(5000) }, { policy: "," },
      { priority: "5.5" }, { priority: " 5" }, { priority: 1e300 }, { priority: -(2 ** 40) }, { priority: null }, { metadata: null }, { metadata: [] },
      { mac_address: 1, public_key: [] }, { mac_address: "m", public_key: "not a key" }, { mac_address: "x".repeat(100), public_key: "k" },
      { resource: "device", resource_id: 1e300, user_id: "u", permission: "read" }, { resource: "device_by_tag", resource_name: {}, user_id: "u", permission: "read" },
      { resource: "__proto__", resource_id: 1, user_id: "u", permission: "read" },
    ];
    const writes: [string, string][] = [
      ["PATCH", `/api/v2/groups/${group.id}/devices`],
      ["PATCH", `/api/v1/groups/${group.id}/devices`],
      ["POST", `/api/v2/groups/${group.id}/package`],
      ["POST", `/api/v1/groups/${group.id}/package`],
      ["POST", `/api/v2/groups/${group.id}/policy`],
      ["POST", `/api/v1/groups/${group.id}/policy`],
      ["POST", `/api/v2/groups/${group.id}/priority`],
      ["POST", "/api/v1/permissions"],
      ["POST", "/api/v1/auth/register"],
      ["DELETE", "/api/v1/auth/pending"],
    ];
    for (const json of bodies) {
      for (const [method, path] of writes) {
        const status = await probe(method, path, { json });
        assert.ok(status >= 400 && status < 500, `${method} ${path} ${JSON.stringify(json)}: ${status}`);
      }
      const created = await probe("POST", "/api/v2/groups", { json });
      assert.ok(created === 400, `POST /api/v2/groups ${JSON.stringify(json)}: ${created}`);
    }
    for (const [method, path] of [...writes, ["POST", "/api/v2/groups"], ["POST", "/api/v1/groups"]] as [string, string][]) {
      assert.equal(await probe(method, path, { body: "{oops", type: "application/json" }), 400, path);
      assert.equal(await probe(method, path, { body: "a=1", type: "application/x-www-form-urlencoded" }), 415, path);
      assert.equal(await probe(method, path, { body: "" , type: "application/json" }), 400, path);
    }
    // Nothing of the refused requests changed the group or the device.
    assert.equal(JSON.stringify(await (await server.request(`/api/v2/groups/${group.id}`, { token: server.adminToken })).json()), before.groups);
    assert.equal(JSON.stringify(await (await server.request(`/api/v1/devices/${device.id}`, { token: server.adminToken })).json()), before.device);

    // Tags: names with slashes, control characters or bad escapes.
    for (const tag of ["%2F", "a%00b", "%0A", "x".repeat(129), "%", "%zz", "%E2%9C%93"]) {
      await probe("POST", `/api/v2/devices/${device.id}/tag/${tag}`);
      await probe("GET", `/api/v2/tags/${tag}`);
      await probe("DELETE", `/api/v2/devices/${device.id}/tag/${tag}`);
    }
    // Public storage route: traversal and junk signatures.
    for (const name of ["..%2F..%2Fetc%2Fpasswd", "%2e%2e/x", ".tmp/x", "a/../b", "%00", `${pkg.metadata["svc.storage.local.uuid"]}%00`]) {
      const status = await probe("GET", `/local_storage/${name}?expires=99999999999999999999&signature=${"A".repeat(5000)}`);
      assert.ok(status === 403 || status === 404, `${name}: ${status}`);
    }
    // Update check with odd bodies (device token), and tokens of the wrong kind or garbage.
    for (const json of [null, [], {}, { "svc.software.version": 1 }, { "svc.software.version": "v", "svc.hardware.devtype": "d", "svc.hardware.macaddr": device.client.mac, x: { a: 1 } }]) {
      assert.equal(await probe("POST", "/api/v1/update/check", { json, token: device.token }), 400, JSON.stringify(json));
    }
    assert.equal(await probe("POST", "/api/v1/update/check", { json: {}, token: server.adminToken }), 401);
    assert.equal(await probe("GET", "/api/v2/devices", { token: device.token }), 401);
    assert.equal(await probe("GET", "/api/v2/devices", { token: "a.b.c" }), 401);
    // Device authorization with broken bodies and signatures.
    for (const body of ["", "{", "[]", "{}", JSON.stringify({ metadata: {}, public_key: "x", timestamp: 1 }), JSON.stringify({ metadata: { "svc.software.version": "v", "svc.hardware.devtype": "d", "svc.hardware.macaddr": "aa" }, public_key: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", timestamp: 1 })]) {
      const res = await fetch(`${server.url}/api/v1/auth/device`, { method: "POST", body, headers: { "content-type": "application/json", "X-SVC-Device-Signature": "!!" } });
      assert.equal(res.status, 400, body);
    }

    assert.deepEqual(failures, []);
    assert.deepEqual(logged, [], "the server logged errors");
  });
});
