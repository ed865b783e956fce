import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { DeviceClient } from "../../src/update/client/device-client.ts";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { registerDevice } from "./helpers/devices.ts";
import { offerGroup, sha256, uploadOk } from "./helpers/packages.ts";

interface Device {
  client: DeviceClient;
  id: number;
  token: string;
}

describe("update check (6.1) and progress (8), end to end with device tokens", () => {
  const server = useTestServer();
  const admin = () => server.adminToken;

  const group = (policy: string, priority: number, devices: number[], packages: number[]): Promise<number> => offerGroup(server, { policy, priority, devices, packages });
  const body = (device: Device, version: string, extra: Record<string, unknown> = {}, devtype = "board") => ({
    "svc.software.version": version,
    "svc.hardware.devtype": devtype,
    "svc.hardware.macaddr": device.client.mac,
    ...extra,
  });
  const check = async (device: Device, json: unknown) => {
    const res = await device.client.request("/api/v1/update/check", { method: "POST", json });
    const text = await res.text();
    return { status: res.status, text, body: text ? JSON.parse(text) : undefined };
  };
  const pkg = (version: string, fields: Record<string, string> = {}, devtype = "board", file?: Buffer) =>
    uploadOk(server, { token: admin(), version, devtype, fields, file: file ?? Buffer.from(`package ${version} ${JSON.stringify(fields)}`) });

  it("upload, exact_match group, check: 200 with a signed link to the exact bytes; progress at 0", async () => {
    const device = await registerDevice(server);
    const bytes = Buffer.from("the v2 firmware image\n".repeat(1000));
    const v2 = await pkg("v2", {}, "board", bytes);
    await group("exact_match,v2", 10, [device.id], [v2.id]);
    assert.equal((await server.call("GET", `/api/v2/devices/${device.id}/progress`)).status, 404, "not updating yet");

    const res = await check(device, body(device, "v1"));
    assert.equal(res.status, 200, res.text);
    // `version` is a labgate extension (the agent reports what it installed); the rest is 6.1.
    assert.deepEqual(Object.keys(res.body).sort(), ["created", "id", "sha256", "uri", "version"]);
    assert.equal(res.body.version, "v2");
    assert.equal(res.body.id, v2.id);
    assert.equal(res.body.sha256, sha256(bytes));
    assert.equal(res.body.created, v2.created);
    assert.ok(res.body.uri.startsWith(`${server.url}/local_storage/`), res.body.uri);
    const download = await fetch(res.body.uri);
    assert.equal(download.status, 200);
    const got = Buffer.from(await download.arrayBuffer());
    assert.deepEqual(got, bytes);
    assert.equal(sha256(got), res.body.sha256);

    const progress = await server.call("GET", `/api/v2/devices/${device.id}/progress`);
    assert.equal(progress.status, 200);
    assert.equal(progress.body.id, device.id);
    assert.equal(progress.body.mac_address, device.client.mac);
    assert.equal(progress.body.version, "v2");
    assert.equal(progress.body.progress, 0);
    assert.match(progress.body.created, / GMT$/);
    const list = await server.call("GET", "/api/v2/devices/progress");
    assert.equal(list.status, 200);
    assert.ok((list.body as { id: number; progress: number }[]).some((r) => r.id === device.id && r.progress === 0));

    // The device reports last_access through its token.
    const info = await server.call("GET", `/api/v2/devices/${device.id}`);
    assert.notEqual(info.body.last_access, null);

    // At the target: nothing more to do.
    const done = await check(device, body(device, "v2"));
    assert.equal(done.status, 204);
    assert.equal(done.text, "");
  });

  it("204 without a group, with no_update, with a device-type mismatch, without a path", async () => {
    const lonely = await registerDevice(server);
    assert.equal((await check(lonely, body(lonely, "v1"))).status, 204);
    assert.equal((await server.call("GET", `/api/v2/devices/${lonely.id}/progress`)).status, 404);

    const a = await registerDevice(server);
    const p = await pkg("n2");
    const g = await group("no_update,", 10, [a.id], [p.id]);
    assert.equal((await check(a, body(a, "n1"))).status, 204);
    assert.equal((await server.call("POST", `/api/v2/groups/${g}/policy`, { policy: "exact_match,n2" })).status, 200);
    assert.equal((await check(a, body(a, "n1"))).status, 200, "the policy change is seen at once");
    assert.equal((await check(a, body(a, "n1", {}, "otherboard"))).status, 204, "device type mismatch");
    assert.equal((await server.call("POST", `/api/v2/groups/${g}/policy`, { policy: "exact_match,n9" })).status, 200);
    assert.equal((await check(a, body(a, "n1"))).status, 204, "no package of the target version");
    // A package of the target that needs an intermediate version nobody has: no path.
    const b = await registerDevice(server);
    const needs = await pkg("m3", { "requires:svc.software.version": "m2" });
    await group("exact_match,m3", 10, [b.id], [needs.id]);
    assert.equal((await check(b, body(b, "m1"))).status, 204);
  });

  it("follows requires: clauses, multi-hop paths and the lowest package id", async () => {
    const device = await registerDevice(server);
    const delta = await pkg("r2", { "requires:svc.software.version": "r1", "requires:svc.software.supports_xdelta": "true" });
    const full = await pkg("r2");
    const hop = await pkg("r3", { "requires:svc.software.version": "r2" });
    const g = await group("exact_match,r2", 10, [device.id], [delta.id, full.id, hop.id]);
    assert.equal((await check(device, body(device, "r1"))).body.id, full.id, "requires: mismatch falls back to the full package");
    assert.equal((await check(device, body(device, "r1", { "svc.software.supports_xdelta": "true" }))).body.id, delta.id, "both fit: lowest id");
    assert.equal((await server.call("POST", `/api/v2/groups/${g}/policy`, { policy: "exact_match,r3" })).status, 200);
    assert.equal((await check(device, body(device, "r1"))).body.id, full.id, "first hop of r1 -> r2 -> r3");
    assert.equal((await check(device, body(device, "r2"))).body.id, hop.id);
    // Downgrade.
    assert.equal((await server.call("POST", `/api/v2/groups/${g}/policy`, { policy: "exact_match,r2" })).status, 200);
    assert.equal((await check(device, body(device, "r3"))).body.id, full.id);
    const progress = await server.call("GET", `/api/v2/devices/${device.id}/progress`);
    assert.equal(progress.body.version, "r2");
  });

  it("two groups: the lowest priority value decides, without falling back", async () => {
    const device = await registerDevice(server);
    const p = await pkg("q2");
    const quiet = await group("no_update,", 10, [device.id], []);
    const eager = await group("exact_match,q2", 20, [device.id], [p.id]);
    assert.equal((await check(device, body(device, "q1"))).status, 204, "the priority-10 group says no update");
    assert.equal((await server.call("POST", `/api/v2/groups/${quiet}/priority`, { priority: 30 })).status, 200);
    assert.equal((await check(device, body(device, "q1"))).body.id, p.id, "now the priority-20 group applies");
    assert.equal((await server.call("PATCH", `/api/v2/groups/${eager}/devices`, { add: [], remove: [device.id] })).status, 200);
    assert.equal((await check(device, body(device, "q1"))).status, 204, "membership change is seen at once");
  });

  it("validates the body (400 naming the key), needs a device token (401) and the token's own MAC (403)", async () => {
    const device = await registerDevice(server);
    const other = await registerDevice(server);
    const full = body(device, "v1");
    for (const key of Object.keys(full)) {
      const partial: Record<string, unknown> = { ...full };
      delete partial[key];
      const res = await check(device, partial);
      assert.equal(res.status, 400, key);
      assert.ok(res.body.error.includes(key), res.body.error);
    }
    for (const bad of [[], "x", { ...full, "svc.software.version": 1 }, { ...full, extra: { nested: true } }, { ...full, "svc.hardware.macaddr": "" }]) {
      assert.equal((await check(device, bad)).status, 400, JSON.stringify(bad));
    }
    assert.equal((await check(device, { ...full, "svc.software.tags": ["a", "b"] })).status, 204, "lists of strings are fine");
    const raw = await device.client.request("/api/v1/update/check", { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" });
    assert.equal(raw.status, 400);

    const noToken = await fetch(`${server.url}/api/v1/update/check`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(full) });
    assert.equal(noToken.status, 401);
    const mgmt = await server.request("/api/v1/update/check", { method: "POST", token: admin(), json: full });
    assert.equal(mgmt.status, 401, "a management token is not a device token");
    const spoof = await check(device, body(other, "v1"));
    assert.equal(spoof.status, 403, "the body names another device");
    assert.equal((await check(device, { ...full, "svc.hardware.macaddr": device.client.mac.toUpperCase() })).status, 204, "MAC case does not matter");
    // A deleted device's token is refused.
    assert.equal((await server.call("DELETE", `/api/v2/devices/${device.id}`)).status, 200);
    const gone = await fetch(`${server.url}/api/v1/update/check`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer token=${device.token}` },
      body: JSON.stringify(full),
    });
    assert.equal(gone.status, 401);
  });

  it("a delta made after checks were answered is offered at the next check, and no longer once it is deleted", async () => {
    const device = await registerDevice(server);
    const base = await pkg("x1", {}, "board", Buffer.from("the x1 image\n".repeat(2000)));
    const target = await pkg("x2", {}, "board", Buffer.from("the x2 image\n".repeat(2000)));
    await group("exact_match,x2", 10, [device.id], [target.id]);
    const first = await check(device, body(device, "x1"));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.delta, undefined, "no delta yet");

    const queued = await server.call<{ id: number }>("POST", `/api/v1/packages/${target.id}/delta`, { from: base.id });
    assert.equal(queued.status, 202, JSON.stringify(queued.body));
    const job = await waitFor(async () => (await server.call<Array<{ id: number; state: string; package?: number; error?: string }>>("GET", "/api/v1/packages/deltas")).body.find((j) => j.id === queued.body.id && j.state !== "queued" && j.state !== "running"), 20_000, "the delta made");
    assert.equal(job.state, "done", job.error);
    const offered = await check(device, body(device, "x1"));
    assert.equal(offered.status, 200, offered.text);
    assert.equal(offered.body.id, target.id);
    assert.equal(offered.body.delta?.id, job.package, offered.text);
    assert.equal(offered.body.delta.base_version, "x1");
    assert.equal((await check(device, body(device, "x0"))).body.delta, undefined, "a device on another version gets no delta");

    assert.equal((await server.call("DELETE", `/api/v1/packages/${job.package}`)).status, 200);
    const after = await check(device, body(device, "x1"));
    assert.equal(after.status, 200, after.text);
    assert.equal(after.body.delta, undefined, "the deleted delta is not offered");
  });

  it("progress endpoints: access, filtering, 404s, cascade on device deletion", async () => {
    const device = await registerDevice(server);
    const p = await pkg("w2");
    const g = await group("exact_match,w2", 10, [device.id], [p.id]);
    assert.equal((await check(device, body(device, "w1"))).status, 200);
    assert.equal((await server.call("GET", "/api/v2/devices/progress", undefined, "")).status, 401);
    assert.equal((await server.call("GET", `/api/v2/devices/${device.id}/progress`, undefined, "")).status, 401);
    assert.equal((await server.call("GET", "/api/v2/devices/999999/progress")).status, 404);

    const gina = server.token([], "gina");
    assert.deepEqual((await server.call("GET", "/api/v2/devices/progress", undefined, gina)).body, []);
    assert.equal((await server.call("GET", `/api/v2/devices/${device.id}/progress`, undefined, gina)).status, 404);
    assert.equal((await server.call("POST", "/api/v1/permissions", { resource: "group", resource_id: g, user_id: "gina", permission: "read" })).status, 200);
    assert.deepEqual(((await server.call("GET", "/api/v2/devices/progress", undefined, gina)).body as { id: number }[]).map((r) => r.id), [device.id]);
    assert.equal((await server.call("GET", `/api/v2/devices/${device.id}/progress`, undefined, gina)).status, 200);

    assert.equal((await server.call("PATCH", `/api/v2/groups/${g}/devices`, { add: [], remove: [device.id] })).status, 200);
    assert.equal((await server.call("DELETE", `/api/v2/devices/${device.id}`)).status, 200);
    assert.ok(!((await server.call("GET", "/api/v2/devices/progress")).body as { id: number }[]).some((r) => r.id === device.id));
  });
});
