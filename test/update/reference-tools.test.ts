/*
 * The reference's own tools against labgate (issue 32): rdfm-mgmt loads its answers with strict
 * schemas (an unknown field is an error), the reference's Go device client with typed structs,
 * and both send requests the way the reference's request schemas read them (ids as text).
 * The field lists below are the reference's, written out here; labgate's extras come on request.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { useTestServer, type TestServer } from "../helpers/server.ts";
import { openStream } from "../helpers/events.ts";
import { publicKeyPem, signBody } from "../../src/update/client/device-client.ts";
import { approve, deviceClient, deviceMetadata, json, key, nextMac, registerDevice } from "./helpers/devices.ts";
import { upload, uploadOk } from "./helpers/packages.ts";

const RFC822 = /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const keysOf = (value: object) => Object.keys(value).sort();
const fields = (...names: string[]) => [...names].sort();

/** What the reference's schemas name, field for field. */
const REFERENCE = {
  deviceV2: fields("id", "name", "mac_address", "capabilities", "metadata", "groups", "last_access", "public_key", "connected"),
  deviceV1: fields("id", "name", "mac_address", "capabilities", "metadata", "group", "last_access", "public_key"),
  registration: fields("mac_address", "public_key", "metadata", "last_appeared"),
  groupV2: fields("id", "created", "devices", "packages", "priority", "metadata", "policy"),
  groupV1: fields("id", "created", "devices", "packages", "metadata", "policy"),
  package: fields("id", "created", "sha256", "driver", "metadata"),
  permission: fields("id", "resource", "created", "user_id", "resource_id", "resource_name", "permission"),
  error: fields("error"),
};

const isInt = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v);

/** POST /api/v1/auth/device from a new device with `timestamp` in the signed body, as given; sends it `times` times. */
async function authWith(server: TestServer, timestamp: unknown, times = 1): Promise<Response[]> {
  const keys = key("ed25519", true);
  const body = JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: publicKeyPem(keys.privateKeyPem), timestamp });
  const headers = { "content-type": "application/json", "X-SVC-Device-Signature": signBody(keys.privateKeyPem, Buffer.from(body)) };
  const answers: Response[] = [];
  for (let i = 0; i < times; i++) answers.push(await fetch(`${server.url}/api/v1/auth/device`, { method: "POST", headers, body }));
  return answers;
}

/** A group with a device, a package and a permission, and a device waiting for approval. */
async function lab(server: TestServer) {
  const { id: deviceId, client, token } = await registerDevice(server);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2" });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "lab" } })).body as { id: number };
  assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/policy`, { policy: "exact_match,v2" })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: [deviceId], remove: [] })).status, 200);
  assert.equal((await server.call("POST", "/api/v1/permissions", { resource: "device", resource_id: deviceId, user_id: "alice", permission: "read" })).status, 200);
  const waiting = deviceClient(server);
  assert.equal((await waiting.authorize()).status, "pending");
  return { deviceId, client, token, pkg, group: group.id, waiting };
}

describe("answers the reference's clients load strictly", () => {
  const server = useTestServer();

  it("carry exactly the reference's fields, of its types", async () => {
    const { deviceId, group, waiting } = await lab(server);
    const get = async (path: string) => {
      const res = await server.call("GET", path);
      assert.equal(res.status, 200, path);
      return res.body;
    };

    for (const device of [...(await get("/api/v2/devices")), await get(`/api/v2/devices/${deviceId}`)]) {
      assert.deepEqual(keysOf(device), REFERENCE.deviceV2);
      assert.ok(isInt(device.id) && typeof device.connected === "boolean" && Array.isArray(device.groups));
      assert.match(device.last_access, RFC822);
      for (const value of Object.values(device.capabilities)) assert.equal(typeof value, "boolean");
    }
    for (const device of await get("/api/v1/devices")) assert.deepEqual(keysOf(device), REFERENCE.deviceV1);

    const pending = await get("/api/v1/auth/pending");
    assert.ok(pending.length >= 1);
    for (const entry of pending) {
      assert.deepEqual(keysOf(entry), REFERENCE.registration);
      assert.match(entry.last_appeared, RFC822);
    }
    const detailed = (await get("/api/v1/auth/pending?details=true")).find((p: { mac_address: string }) => p.mac_address === waiting.mac);
    assert.deepEqual(keysOf(detailed), fields(...REFERENCE.registration, "key_fingerprint", "key_change", "device_id", "device_key_fingerprint", "protocol", "identity"));
    assert.equal(detailed.key_change, false);
    assert.deepEqual(keysOf((await get("/api/v1/auth/pending?limit=10&offset=0"))[0]), REFERENCE.registration);

    for (const g of [...(await get("/api/v2/groups")), await get(`/api/v2/groups/${group}`)]) {
      assert.deepEqual(keysOf(g), REFERENCE.groupV2);
      assert.ok(isInt(g.priority) && g.devices.every(isInt) && g.packages.every(isInt));
      assert.match(g.created, RFC822);
    }
    for (const g of await get("/api/v1/groups")) assert.deepEqual(keysOf(g), REFERENCE.groupV1);
    for (const p of await get("/api/v1/packages")) {
      assert.deepEqual(keysOf(p), REFERENCE.package);
      assert.match(p.created, RFC822);
    }
    for (const p of await get("/api/v1/permissions")) {
      assert.deepEqual(keysOf(p), REFERENCE.permission);
      assert.ok(isInt(p.id) && isInt(p.resource_id));
      assert.match(p.created, RFC822);
    }
    const missing = await server.call("GET", "/api/v2/groups/999999");
    assert.equal(missing.status, 404);
    assert.deepEqual(keysOf(missing.body), REFERENCE.error);
  });

  it("an update check answers what the Go client's package struct reads: an unsigned id and strings", async () => {
    const { client, token } = await lab(server);
    const res = await server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(client.mac) });
    assert.equal(res.status, 200);
    const offer = await res.json();
    assert.ok(isInt(offer.id) && offer.id > 0);
    for (const key of ["created", "sha256", "uri"]) assert.equal(typeof offer[key], "string", key);
  });
});

describe("requests read as the reference reads them", () => {
  const server = useTestServer();

  it("takes ids and integers as their decimal text, as rdfm-mgmt sends them", async () => {
    const { deviceId, pkg } = await lab(server);
    const group = (await server.call("POST", "/api/v2/groups", { metadata: {}, priority: "40" })).body as { id: number; priority: number };
    assert.equal(group.priority, 40);
    const add = await server.call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: [String(deviceId)], remove: [] });
    assert.equal(add.status, 200, JSON.stringify(add.body));
    assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/package`, { packages: [String(pkg.id)] })).status, 200);
    assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/priority`, { priority: "41" })).status, 200);
    const after = (await server.call("GET", `/api/v2/groups/${group.id}`)).body;
    assert.deepEqual([after.devices, after.packages, after.priority], [[deviceId], [pkg.id], 41]);
    assert.equal((await server.call("PATCH", `/api/v1/groups/${group.id}/devices`, { add: [], remove: [String(deviceId)] })).status, 200);
    assert.deepEqual((await server.call("GET", `/api/v2/groups/${group.id}`)).body.devices, []);

    const permission = await server.call("POST", "/api/v1/permissions", { resource: "device", resource_id: String(deviceId), user_id: "bob", permission: "read" });
    assert.equal(permission.status, 200, JSON.stringify(permission.body));
    assert.equal(permission.body.resource_id, deviceId);
  });

  it("still refuses what the reference refuses, and is stricter where it truncates or guesses", async () => {
    const { deviceId } = await lab(server);
    const group = (await server.call("POST", "/api/v2/groups", { metadata: {} })).body as { id: number };
    for (const bad of ["1.5", 1.5, "+1", " 1", "1_0", "", "one", true, null, "0", 0, -1, "-1", [1]]) {
      const res = await server.call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: [bad], remove: [] });
      assert.equal(res.status, 400, JSON.stringify(bad));
      assert.match(res.body.error, /"add" must be an array of positive integer ids/);
    }
    for (const bad of ["4.0", "x", true, 2.5]) assert.equal((await server.call("POST", `/api/v2/groups/${group.id}/priority`, { priority: bad })).status, 400, JSON.stringify(bad));
    for (const bad of ["x", "1.5", true]) {
      const res = await server.call("POST", "/api/v1/permissions", { resource: "device", resource_id: bad, user_id: "carol", permission: "read" });
      assert.equal(res.status, 400, JSON.stringify(bad));
    }
    const unchanged = (await server.call("GET", `/api/v2/groups/${group.id}`)).body;
    assert.deepEqual([unchanged.devices, unchanged.priority], [[], 25]);
    assert.equal((await server.call("GET", "/api/v1/permissions")).body.filter((p: { user_id: string }) => p.user_id === "carol").length, 0);
    // Unknown fields stay refused (the reference's schemas raise on them too).
    assert.equal((await server.call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: [deviceId], remove: [], extra: 1 })).status, 400);
  });

  it("takes flags in the reference's spellings and refuses other words", async () => {
    for (const spelling of ["true", "yes", "on", "1", 1]) {
      const mac = nextMac();
      const { client: old } = await registerDevice(server, { mac });
      const rekeyed = deviceClient(server, { mac, keys: key("ed25519", true) });
      assert.equal((await rekeyed.authorize()).status, "pending");
      const res = await server.call("POST", "/api/v1/auth/register", { mac_address: mac, public_key: rekeyed.publicKeyPem, confirm_key_change: spelling });
      assert.equal(res.status, 200, `${JSON.stringify(spelling)}: ${JSON.stringify(res.body)}`);
      assert.equal((await old.authorize()).status, "pending");
    }
    const mac = nextMac();
    await registerDevice(server, { mac });
    const rekeyed = deviceClient(server, { mac, keys: key("ed25519", true) });
    await rekeyed.authorize();
    for (const spelling of ["no", "0", 0, "false"]) assert.equal((await approve(server, rekeyed, spelling as never)).status, 409, JSON.stringify(spelling));
    for (const word of ["maybe", "TrUe", 2, "", []]) assert.equal((await approve(server, rekeyed, word as never)).status, 400, JSON.stringify(word));
    assert.equal((await server.call("GET", "/api/v1/auth/pending?details=maybe")).status, 400);
    assert.equal((await server.call("GET", "/api/v1/auth/pending?details=1")).status, 200);
  });

  it("takes a device's timestamp as its decimal text (signed as sent)", async () => {
    const [res] = await authWith(server, String(Math.floor(server.clock.now() / 1000)));
    assert.equal(res.status, 401, await res.clone().text());
    assert.deepEqual(await res.json(), { error: "device unauthorized" });
  });
});

describe("compat settings turned off, one each", () => {
  const server = useTestServer({
    compat: { key_change_confirmation: false, package_device_type_required: false, action_log_status: "exit_code", sse_comments: false, auth_timestamp_window: 0 },
  });

  it("key_change_confirmation: false approves a new key without the flag (an explicit false still refuses)", async () => {
    const mac = nextMac();
    const { id, client: old } = await registerDevice(server, { mac });
    const rekeyed = deviceClient(server, { mac, keys: key("ed25519", true) });
    await rekeyed.authorize();
    assert.equal((await approve(server, rekeyed, false)).status, 409);
    assert.equal((await approve(server, rekeyed)).status, 200);
    assert.equal((await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }))).public_key, rekeyed.publicKeyPem);
    assert.equal((await old.authorize()).status, "pending");
  });

  it("package_device_type_required: false stores a package without one, and offers it to no device", async () => {
    const res = await upload(server, { token: server.adminToken, devtype: null, version: "v7" });
    assert.equal(res.status, 200, await res.clone().text());
    const pkg = await res.json();
    assert.equal(pkg.metadata["svc.hardware.devtype"], undefined);
    assert.equal((await upload(server, { token: server.adminToken, version: null })).status, 400, "the version stays required");
    const { id, client, token } = await registerDevice(server);
    const group = (await server.call("POST", "/api/v2/groups", { metadata: {} })).body as { id: number };
    await server.call("POST", `/api/v2/groups/${group.id}/package`, { packages: [pkg.id] });
    await server.call("POST", `/api/v2/groups/${group.id}/policy`, { policy: "exact_match,v7" });
    await server.call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: [id], remove: [] });
    const check = await server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(client.mac) });
    assert.equal(check.status, 204);
  });

  it("action_log_status: exit_code shows a finished action's exit code as its status", async () => {
    const { client } = await registerDevice(server);
    await server.db.write(async (tx) => {
      const row = "INSERT INTO action_log (id, mac_address, action_id, created, status, status_code, finished) VALUES (?, ?, ?, ?, ?, ?, ?)";
      const at = new Date(server.clock.now()).toISOString();
      await tx.run(row, ["a-ok", client.mac, "uptime", at, "success", 0, at]);
      await tx.run(row, ["a-killed", client.mac, "sleep", at, "error", -1, at]);
      await tx.run(row, ["a-waiting", client.mac, "uptime", at, "pending", null, null]);
    });
    const log = await json(server.request(`/api/v2/devices/${client.mac}/action/log`, { token: server.adminToken }));
    const status = Object.fromEntries(log.map((e: { id: string; status: string; status_code: number | null }) => [e.id, [e.status, e.status_code]]));
    assert.deepEqual(status, { "a-ok": ["0", 0], "a-killed": ["-1", -1], "a-waiting": ["pending", null] });
  });

  it("sse_comments: false sends no comment line, not even when the stream ends", async () => {
    const token = server.token(["admin_ro"], "watcher");
    const stream = await openStream(server, token);
    assert.equal(stream.status, 200);
    const jti = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).jti as string;
    assert.equal((await server.call("POST", "/api/v1/tokens/revoke", { id: jti })).status, 200);
    assert.equal(await stream.ended, "");
  });

  it("auth_timestamp_window: 0 accepts any timestamp and the same signed request again", async () => {
    assert.deepEqual((await authWith(server, 1694414456, 2)).map((r) => r.status), [401, 401]);
  });
});

describe("compat settings by default", () => {
  const server = useTestServer();

  it("event streams start with the comment :ok and say why they end", async () => {
    const token = server.token(["admin_ro"], "watcher");
    const stream = await openStream(server, token);
    const jti = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).jti as string;
    await server.call("POST", "/api/v1/tokens/revoke", { id: jti });
    assert.match(await stream.ended, /^:ok\n\n(.|\n)*: /);
  });

  it("an old timestamp is refused", async () => {
    const [res] = await authWith(server, 1694414456);
    assert.equal(res.status, 400);
    assert.match((await res.json()).error, /timestamp/);
  });
});
