/*
 * Mender's device API with hand-made requests: auth requests signed with RSA, ECDSA P-256 and
 * Ed25519 keys become pending registrations approved like any other; bad signatures, unknown
 * devices and malformed bodies get Mender's error shape and change nothing; inventory, the
 * next-deployment call in both forms and status reports drive a deployment as an agent's would.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { describe, test } from "node:test";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { deviceClient } from "../update/helpers/devices.ts";

const server = useTestServer();
const AUTH = "/api/devices/v1/authentication/auth_requests";
const NEXT_V2 = "/api/devices/v2/deployments/device/deployments/next";
const DEPLOYMENTS = "/api/devices/v1/deployments/device/deployments";

type Kind = "rsa" | "ec" | "ed25519";
interface Client {
  identity: Record<string, string>;
  pubkey: string;
  privateKey: KeyObject;
  kind: Kind;
}
let macs = 0;
function client(kind: Kind = "rsa", identity?: Record<string, string>): Client {
  const pair =
    kind === "rsa" ? generateKeyPairSync("rsa", { modulusLength: 2048 }) : kind === "ec" ? generateKeyPairSync("ec", { namedCurve: "prime256v1" }) : generateKeyPairSync("ed25519");
  const mac = `02:4d:00:00:00:${(++macs).toString(16).padStart(2, "0")}`;
  return { identity: identity ?? { mac }, pubkey: pair.publicKey.export({ type: "spki", format: "pem" }) as string, privateKey: pair.privateKey, kind };
}
const signBody = (c: Client, body: Buffer) => sign(c.kind === "ed25519" ? null : "sha256", body, c.privateKey).toString("base64");

async function authRequest(c: Client, options: { body?: string; signature?: string | null } = {}): Promise<Response> {
  const body = Buffer.from(options.body ?? JSON.stringify({ id_data: JSON.stringify(c.identity), pubkey: c.pubkey }));
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (options.signature !== null) headers["x-men-signature"] = options.signature ?? signBody(c, body);
  return fetch(`${server.url}${AUTH}`, { method: "POST", headers, body });
}

const pending = async () => (await server.call<any[]>("GET", "/api/v1/auth/pending?details=true")).body;

/** Mender's error body: `error` and the request's id, nothing else. */
async function menderError(res: Response, status: number): Promise<string> {
  assert.equal(res.status, status);
  const body = (await res.json()) as Record<string, unknown>;
  assert.deepEqual(Object.keys(body).sort(), ["error", "request_id"]);
  assert.equal(body.request_id, res.headers.get("x-request-id"));
  return body.error as string;
}

/** Asks, is approved through the API, asks again: its token. */
async function accepted(c: Client): Promise<{ token: string; mac: string; id: number }> {
  await menderError(await authRequest(c), 401);
  const entry = (await pending()).find((p) => p.public_key === c.pubkey);
  assert.ok(entry, "the device is pending");
  assert.equal((await server.call("POST", "/api/v1/auth/register", { mac_address: entry.mac_address, public_key: entry.public_key })).status, 200);
  const res = await authRequest(c);
  assert.equal(res.status, 200);
  const token = await res.text();
  assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/);
  const device = (await server.call<any[]>("GET", "/api/v2/devices")).body.find((d) => d.mac_address === entry.mac_address);
  return { token, mac: entry.mac_address, id: device.id };
}

const deviceCall = (token: string, method: string, path: string, json?: unknown) =>
  fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${token}`, ...(json === undefined ? {} : { "content-type": "application/json" }) }, body: json === undefined ? undefined : JSON.stringify(json) });

describe("Mender authentication", () => {
  for (const kind of ["rsa", "ec", "ed25519"] as const) {
    test(`a ${kind} key: pending with its identity, approved through the API, then the raw token`, async () => {
      const c = client(kind, { mac: `02:4D:0${kind.length}:00:00:0${kind.length}`, serial: `sn-${kind}` });
      await menderError(await authRequest(c), 401);
      const entry = (await pending()).find((p) => p.public_key === c.pubkey);
      assert.equal(entry.mac_address, c.identity.mac.toLowerCase());
      assert.equal(entry.protocol, "mender");
      assert.deepEqual(entry.identity, c.identity);
      const plain = (await server.call<any[]>("GET", "/api/v1/auth/pending")).body.find((p) => p.public_key === c.pubkey);
      assert.deepEqual(Object.keys(plain).sort(), ["last_appeared", "mac_address", "metadata", "public_key"]);
      const { token } = await accepted(c);
      const inventory = await deviceCall(token, "PATCH", "/api/devices/v1/inventory/device/attributes", [{ name: "device_type", value: "qemu" }]);
      assert.equal(inventory.status, 200);
    });
  }

  test("a labgate agent cannot claim to be a Mender client: the server sets the protocol", async () => {
    const agent = deviceClient(server, { extra: { "svc.device.protocol": "mender", "svc.device.identity": '{"mac":"x"}' } });
    assert.equal((await agent.authorize()).status, "pending");
    const entry = (await pending()).find((p) => p.mac_address === agent.mac);
    assert.equal(entry.protocol, "labgate");
    assert.equal(entry.identity, null);
    assert.equal(entry.metadata["svc.device.protocol"], undefined);
  });

  test("an identity without a MAC gets a stable id", async () => {
    const c = client("ed25519", { serial: "no-mac-1", board: "x" });
    await authRequest(c);
    await authRequest(c);
    const entries = (await pending()).filter((p) => p.public_key === c.pubkey);
    assert.equal(entries.length, 1);
    assert.match(entries[0].mac_address, /^mender-[0-9a-f]{16}$/);
  });

  test("bad signatures, missing ones and malformed bodies: Mender's error, nothing pending", async () => {
    const before = (await pending()).length;
    const c = client("rsa");
    const other = client("rsa");
    assert.match(await menderError(await authRequest(c, { signature: signBody(other, Buffer.from("{}")) }), 401), /signature/);
    assert.match(await menderError(await authRequest(c, { signature: null }), 401), /X-MEN-Signature/);
    assert.match(await menderError(await authRequest(c, { signature: "not base64!" }), 401), /signature/);
    assert.match(await menderError(await authRequest(c, { body: "{not json" }), 400), /JSON/);
    assert.match(await menderError(await authRequest(c, { body: JSON.stringify({ id_data: "{x", pubkey: c.pubkey }) }), 400), /id_data/);
    assert.match(await menderError(await authRequest(c, { body: JSON.stringify({ id_data: "{}", pubkey: c.pubkey }) }), 400), /id_data/);
    assert.match(await menderError(await authRequest(c, { body: JSON.stringify({ id_data: JSON.stringify({ mac: "02:00:00:00:00:09" }), pubkey: "junk" }) }), 400), /public key/);
    assert.match(await menderError(await authRequest(c, { body: JSON.stringify({ pubkey: c.pubkey }) }), 400), /id_data/);
    assert.equal((await pending()).length, before);
  });

  test("device routes: no token, a management token, a malformed body", async () => {
    await menderError(await fetch(`${server.url}${NEXT_V2}`, { method: "POST" }), 401);
    await menderError(await deviceCall(server.adminToken, "POST", NEXT_V2, { device_provides: { device_type: "a", artifact_name: "b" } }), 401);
    const { token, id } = await accepted(client("ec"));
    const before = (await server.call("GET", `/api/v2/devices/${id}`)).body.metadata;
    assert.match(await menderError(await deviceCall(token, "POST", NEXT_V2, { device_provides: { device_type: "" } }), 400), /device_type|artifact_name/);
    assert.match(await menderError(await deviceCall(token, "PATCH", "/api/devices/v1/inventory/device/attributes", { name: "x" }), 400), /attributes/);
    assert.match(await menderError(await deviceCall(token, "PUT", `${DEPLOYMENTS}/1-1-1/status`, { status: "bogus" }), 400), /status/);
    await menderError(await deviceCall(token, "PUT", `${DEPLOYMENTS}/nonsense/status`, { status: "installing" }), 404);
    assert.deepEqual((await server.call("GET", `/api/v2/devices/${id}`)).body.metadata, before);
  });
});

describe("Mender inventory and deployments", () => {
  test("inventory is the device's metadata; the next call in both forms offers the deployment's package; statuses are its outcomes", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "m2", devtype: "qemu-m" });
    const a = await accepted(client("rsa"));
    const b = await accepted(client("ed25519"));
    for (const d of [a, b]) {
      const put = await deviceCall(d.token, "PUT", "/api/devices/v1/inventory/device/attributes", [
        { name: "artifact_name", value: "m1" },
        { name: "device_type", value: "qemu-m" },
        { name: "kernel", value: "6.1" },
        { name: "ips", value: ["10.0.0.1", "10.0.0.2"] },
      ]);
      assert.equal(put.status, 200);
    }
    const meta = (await server.call("GET", `/api/v2/devices/${a.id}`)).body.metadata;
    assert.equal(meta["svc.software.version"], "m1");
    assert.equal(meta["svc.hardware.devtype"], "qemu-m");
    assert.equal(meta.kernel, "6.1");
    assert.deepEqual(meta.ips, ["10.0.0.1", "10.0.0.2"]);
    assert.equal(meta["svc.device.protocol"], "mender");
    // Not in a group: nothing.
    assert.equal((await deviceCall(a.token, "POST", NEXT_V2, { device_provides: { device_type: "qemu-m", artifact_name: "m1" } })).status, 204);

    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "mender-boards" } })).body.id as number;
    assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
    assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [a.id, b.id], remove: [] })).status, 200);
    const created = await server.call("POST", "/api/v2/deployments", { group, version: "m2", phases: [100], success_percent: 100, error_percent: 100, retries: 0 });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const deployment = created.body.id as number;

    const v2 = await deviceCall(a.token, "POST", NEXT_V2, { device_provides: { device_type: "qemu-m", artifact_name: "m1" }, update_control_map: false });
    assert.equal(v2.status, 200);
    const offer = (await v2.json()) as any;
    assert.equal(offer.artifact.artifact_name, "m2");
    assert.deepEqual(offer.artifact.device_types_compatible, ["qemu-m"]);
    const download = await fetch(offer.artifact.source.uri);
    assert.equal(download.status, 200);
    assert.equal(Buffer.from(await download.arrayBuffer()).toString(), "hello package");
    const v1 = await deviceCall(b.token, "GET", `${DEPLOYMENTS}/next?artifact_name=m1&device_type=qemu-m`);
    assert.equal(v1.status, 200);
    const offerB = (await v1.json()) as any;

    const status = (d: { token: string }, id: string, s: string) => deviceCall(d.token, "PUT", `${DEPLOYMENTS}/${id}/status`, { status: s });
    const member = async (device: number) => (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=100`)).body.find((m) => m.device === device);
    for (const s of ["downloading", "installing", "rebooting", "success"]) assert.equal((await status(a, offer.id, s)).status, 204);
    assert.equal((await member(a.id)).state, "installed");
    for (const s of ["downloading", "installing", "failure"]) assert.equal((await status(b, offerB.id, s)).status, 204);
    const lines = Array.from({ length: 300 }, (_, i) => ({ timestamp: "2026-01-01T00:00:00Z", level: "error", message: `line ${i}: the update module exited 1` }));
    assert.equal((await deviceCall(b.token, "PUT", `${DEPLOYMENTS}/${offerB.id}/log`, { messages: lines })).status, 204);
    const failed = await waitFor(async () => {
      const m = await member(b.id);
      return m.state === "failed" ? m : undefined;
    });
    assert.match(failed.output, /line 299: the update module exited 1$/);
    assert.ok(Buffer.byteLength(failed.output) <= 4096);
    const view = await waitFor(async () => {
      const d = (await server.call("GET", `/api/v2/deployments/${deployment}`)).body;
      return d.status === "completed_with_failures" ? d : undefined;
    });
    assert.equal(view.status, "completed_with_failures");
  });

  test("a deployment aborted while the device downloads answers its next status with 409, as Mender's server does", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "a2", devtype: "qemu-a" });
    const d = await accepted(client("ec"));
    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "mender-abort" } })).body.id as number;
    await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [d.id], remove: [] });
    const deployment = (await server.call("POST", "/api/v2/deployments", { group, version: "a2", phases: [100], retries: 0 })).body.id as number;
    const offer = (await (await deviceCall(d.token, "POST", NEXT_V2, { device_provides: { device_type: "qemu-a", artifact_name: "a1" } })).json()) as any;
    assert.equal((await deviceCall(d.token, "PUT", `${DEPLOYMENTS}/${offer.id}/status`, { status: "downloading" })).status, 204);
    assert.equal((await server.call("POST", `/api/v2/deployments/${deployment}/abort`)).status, 200);
    assert.match(await menderError(await deviceCall(d.token, "PUT", `${DEPLOYMENTS}/${offer.id}/status`, { status: "installing" }), 409), /aborted/);
    assert.equal((await deviceCall(d.token, "POST", NEXT_V2, { device_provides: { device_type: "qemu-a", artifact_name: "a1" } })).status, 204);
  });

  test("a failure whose log never comes is recorded without output after the wait", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "n2", devtype: "qemu-n" });
    const d = await accepted(client("ed25519"));
    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "mender-nolog" } })).body.id as number;
    await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [d.id], remove: [] });
    const deployment = (await server.call("POST", "/api/v2/deployments", { group, version: "n2", phases: [100], retries: 0 })).body.id as number;
    const offer = (await (await deviceCall(d.token, "POST", NEXT_V2, { device_provides: { device_type: "qemu-n", artifact_name: "n1" } })).json()) as any;
    assert.equal((await deviceCall(d.token, "PUT", `${DEPLOYMENTS}/${offer.id}/status`, { status: "failure" })).status, 204);
    const member = await waitFor(async () => {
      const m = (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body.find((x) => x.device === d.id);
      return m.state === "failed" ? m : undefined;
    }, 10_000, "failed without a log");
    assert.equal(member.output, null);
  });
});
