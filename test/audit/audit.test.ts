/*
 * Issue 29: the audit log. Each family of changes leaves its entry (actor, target, detail), in
 * the change's transaction; a refused authorization is recorded; GET /api/v1/audit filters,
 * pages and streams CSV; retention drops the oldest; the CLI records with no server running.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, test } from "node:test";
import { recordAudit, systemActor } from "../../src/audit/audit.ts";
import { runCli } from "../helpers/cli.ts";
import { startTestServer, tempDir, removeDir, useTestServer } from "../helpers/server.ts";
import { adminPassword, login } from "../accounts/helpers.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { bulkRows, entries, newest, type Entry } from "./helpers.ts";

describe("the audit log records each family of changes", () => {
  const server = useTestServer();

  test("devices: approval, rename, tags, deletion, by the token that did it, from its address", async () => {
    const ops = server.token(["admin_rw"], "olga");
    const { id, client } = await registerDevice(server);
    const approve = await newest(server, "device.approve");
    assert.deepEqual([approve.actor_kind, approve.actor, approve.target, approve.outcome, approve.client], ["token", "admin", `device:${id}`, "ok", "127.0.0.1"]);
    assert.equal(approve.detail?.mac, client.mac);
    assert.match(approve.token_id ?? "", /^[0-9a-f]{24}$/);
    assert.equal((await server.call("PATCH", `/api/v2/devices/${id}`, { name: "bench" }, ops)).status, 200);
    assert.equal((await server.call("POST", `/api/v2/devices/${id}/tag/lab`, undefined, ops)).status, 200);
    assert.equal((await server.call("DELETE", `/api/v2/devices/${id}`, undefined, ops)).status, 200);
    const device = await entries(server, `target=device:${id}`);
    assert.deepEqual(device.map((e) => [e.action, e.actor]), [["device.delete", "olga"], ["device.tag", "olga"], ["device.rename", "olga"], ["device.approve", "admin"]]);
    assert.deepEqual(device[2].detail, { from: device[2].detail?.from, to: "bench" });
  });

  test("groups, packages and permissions", async () => {
    const { id: deviceId } = await registerDevice(server);
    const pkg = await uploadOk(server, { token: server.adminToken, version: "v2" });
    const group = (await server.call<{ id: number }>("POST", "/api/v2/groups", { metadata: { "svc.group.name": "bench" } })).body.id;
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [deviceId], remove: [] });
    await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
    await server.call("POST", `/api/v2/groups/${group}/policy`, { policy: "exact_match,v2" });
    await server.call("POST", `/api/v2/groups/${group}/priority`, { priority: 7 });
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [], remove: [deviceId] });
    await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [] });
    assert.equal((await server.call("DELETE", `/api/v2/groups/${group}`)).status, 200);
    assert.deepEqual(
      (await entries(server, `target=group:${group}`)).map((e) => e.action).reverse(),
      ["group.create", "group.devices", "group.packages", "group.policy", "group.priority", "group.devices", "group.packages", "group.delete"],
    );
    assert.deepEqual((await newest(server, "group.policy")).detail, { from: "no_update,", to: "exact_match,v2" });
    assert.deepEqual((await newest(server, "group.create")).detail, { name: "bench", priority: 25 }, "named by svc.group.name, as the console names it");

    assert.equal((await server.call("DELETE", `/api/v1/packages/${pkg.id}`)).status, 200);
    assert.deepEqual((await entries(server, `target=package:${pkg.id}`)).map((e) => e.action), ["package.delete", "package.upload"]);
    assert.equal((await newest(server, "package.upload")).detail?.sha256, pkg.sha256);

    const permission = (await server.call<{ id: number }>("POST", "/api/v1/permissions", { resource: "device", resource_id: deviceId, user_id: "pat", permission: "read" })).body;
    assert.equal((await server.call("DELETE", `/api/v1/permissions/${permission.id}`)).status, 200);
    const perms = await entries(server, `target=permission:${permission.id}`);
    assert.deepEqual(perms.map((e) => [e.action, e.detail?.user_id]), [["permission.delete", "pat"], ["permission.create", "pat"]]);
  });

  test("accounts, logins and token revocation; no password in any detail", async () => {
    assert.equal((await server.call("POST", "/api/v1/users", { name: "vera", password: "correct horse", scopes: ["svc_tests_ro"] })).status, 201);
    assert.equal((await server.call("PATCH", "/api/v1/users/vera", { password: "battery staple", disabled: true })).status, 200);
    assert.equal((await login(server, "admin", "wrong password")).status, 401);
    assert.equal((await login(server, "admin", adminPassword(server))).status, 200);
    assert.equal((await server.call("POST", "/api/v1/tokens/revoke", { user: "vera" })).status, 200);
    assert.deepEqual((await entries(server, "target=user:vera")).map((e) => e.action), ["token.revoke", "user.disable", "user.passwd", "user.add"]);
    // Nobody signed in: the attempt is anonymous's, at the name tried (issue 40.5).
    const failure = await newest(server, "login.failure");
    assert.deepEqual([failure.actor_kind, failure.actor, failure.outcome, failure.target, failure.detail], ["anonymous", "anonymous", "refused", "user:admin", { tried: "admin" }]);
    const success = await newest(server, "login.success");
    assert.deepEqual([success.actor, success.actor_kind, success.outcome], ["admin", "account", "ok"]);
    const all = JSON.stringify(await entries(server, "limit=1000"));
    for (const secret of ["correct horse", "battery staple", adminPassword(server), "wrong password"]) assert.ok(!all.includes(secret), secret);
  });

  test("deployments: create, pause, resume, abort", async () => {
    const { id: deviceId } = await registerDevice(server);
    const pkg = await uploadOk(server, { token: server.adminToken, version: "v5" });
    const group = (await server.call<{ id: number }>("POST", "/api/v2/groups", { metadata: {} })).body.id;
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [deviceId], remove: [] });
    const created = await server.call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v5", packages: [pkg.id] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    for (const step of ["pause", "resume", "abort"]) assert.equal((await server.call("POST", `/api/v2/deployments/${id}/${step}`)).status, 200, step);
    const list = await entries(server, `target=deployment:${id}`);
    assert.deepEqual(list.map((e) => e.action), ["deployment.abort", "deployment.resume", "deployment.pause", "deployment.create"]);
    assert.deepEqual([list[3].detail?.group, list[3].detail?.version, list[3].detail?.devices], [group, "v5", 1]);
  });

  test("test configs, test runs and backups", async () => {
    const form = new FormData();
    form.set("file", new Blob([readFileSync("assets/testrun/samples/exec.yml")]), "audit-exec.yml");
    assert.equal((await server.request("/api/v1/configs", { method: "POST", token: server.adminToken, body: form })).status, 200);
    const trigger = await server.call<{ id: string }>("POST", "/api/v1/test-runs", { config_name: "audit-exec.yml" });
    assert.equal(trigger.status, 200, JSON.stringify(trigger.body));
    const run = await newest(server, "testrun.trigger");
    assert.deepEqual([run.target, run.detail?.config], [`run:${trigger.body.id}`, "audit-exec.yml"]);
    assert.equal((await server.call("DELETE", "/api/v1/configs/audit-exec.yml")).status, 200);
    assert.deepEqual((await entries(server, "target=config:audit-exec.yml")).map((e) => e.action), ["config.delete", "config.upload"]);
    const backup = await server.request("/api/v1/backup", { method: "POST", token: server.adminToken });
    assert.equal(backup.status, 200);
    await backup.arrayBuffer();
    assert.equal((await newest(server, "backup")).actor, "admin");
  });

  test("an action on a device, queued while it is offline, is recorded with its action id and device count", async () => {
    const { client, id } = await registerDevice(server);
    const res = await server.request(`/api/v2/devices/${client.mac}/action/exec/uptime`, { token: server.adminToken });
    assert.equal(res.status, 202);
    const exec = await newest(server, "action.exec");
    assert.deepEqual([exec.target, exec.detail], [`device:${id}`, { action_id: "uptime", devices: 1 }]);
  });

  test("a refused request (403) is recorded with who was refused; update checks are not recorded", async () => {
    const nobody = server.token(["tests_ro"], "mallory");
    assert.equal((await server.call("GET", "/api/v1/audit", undefined, nobody)).status, 403);
    assert.equal((await server.call("DELETE", "/api/v1/packages/1", undefined, nobody)).status, 403);
    const refused = await entries(server, "outcome=refused&actor=mallory");
    assert.deepEqual(refused.map((e) => [e.action, e.target, e.actor_kind]), [["auth.refused", "DELETE /api/v1/packages/:id", "token"], ["auth.refused", "GET /api/v1/audit", "token"]]);
    const { client, token } = await registerDevice(server);
    const before = (await entries(server, "limit=1"))[0].id;
    await server.request("/api/v1/update/check", { method: "POST", token, json: { "svc.software.version": "v1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": client.mac } });
    assert.equal((await entries(server, "limit=1"))[0].id, before);
  });

  test("the API: admin read scope, filters (time, actor, action prefix, target), paging with X-Total-Count", async () => {
    assert.equal((await server.call("GET", "/api/v1/audit", undefined, server.token(["admin_ro"], "reader"))).status, 200);
    const total = Number((await server.call("GET", "/api/v1/audit?limit=1")).headers.get("x-total-count"));
    const page = await server.call<Entry[]>("GET", "/api/v1/audit?limit=2&offset=1");
    assert.equal(page.body.length, 2);
    assert.equal(Number(page.headers.get("x-total-count")), total);
    const group = await entries(server, "action=group&limit=1000");
    assert.ok(group.length >= 8 && group.every((e) => e.action.startsWith("group.")));
    assert.equal((await entries(server, "action=grou")).length, 0, "a prefix is a whole dotted part");
    const now = new Date(server.clock.now());
    assert.equal((await entries(server, `since=${new Date(now.getTime() + 1000).toISOString()}`)).length, 0);
    assert.ok((await entries(server, `until=${new Date(now.getTime() + 1000).toISOString()}`)).length > 0);
    for (const bad of ["since=yesterday", "limit=0", "outcome=maybe", `since=${now.toISOString()}&until=${now.toISOString()}`]) {
      assert.equal((await server.call("GET", `/api/v1/audit?${bad}`)).status, 400, bad);
    }
  });
});

describe("audit export", () => {
  const server = useTestServer();

  test("?format=csv: a few matching rows between long runs of others, and runs longer than a batch, each once, newest first", async () => {
    const ids = async (query: string) => {
      const res = await server.request(`/api/v1/audit?format=csv&${query}`, { token: server.adminToken });
      assert.equal(res.status, 200);
      return (await res.text()).split("\r\n").slice(1, -1).map((line) => Number(line.slice(0, line.indexOf(","))));
    };
    const actor = systemActor("sparse", new Date(server.clock.now()));
    const few = [await recordAudit(server.server.ctx.store.query, actor, "sparse.one", "row:first")];
    await bulkRows(server, 5_000, "filler.row");
    for (const target of ["a", "b"]) few.push(await recordAudit(server.server.ctx.store.query, actor, "sparse.two", `row:${target}`));
    await bulkRows(server, 2_500, "dense.row");
    await bulkRows(server, 3_000, "filler.row");
    assert.deepEqual(await ids("action=sparse"), few.reverse());
    const dense = await ids("action=dense");
    assert.equal(dense.length, 2_500);
    assert.ok(dense.every((id, i) => i === 0 || id === dense[i - 1] - 1), "every row once, newest first");
    assert.deepEqual(await ids("action=nothing"), []);
    assert.equal((await ids("action=filler")).length, 8_000);
    assert.equal(new Set(await ids("")).size, Number((await server.call("GET", "/api/v1/audit?limit=1")).headers.get("x-total-count")));
  });

  test("?format=csv streams every matching entry, 100,000 rows with flat memory", async () => {
    await bulkRows(server, 100_000);
    // Live heap (after a collection) while the export streams: what the server holds for it.
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    gc();
    const base = process.memoryUsage().heapUsed;
    let peak = base;
    let chunks = 0;
    const res = await server.request("/api/v1/audit?format=csv&action=bulk", { token: server.adminToken });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/csv/);
    let bytes = 0;
    let lines = 0;
    let first = "";
    const decoder = new TextDecoder();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      bytes += chunk.length;
      const text = decoder.decode(chunk, { stream: true });
      if (!first) first = text.slice(0, text.indexOf("\r\n"));
      for (let at = text.indexOf("\n"); at >= 0; at = text.indexOf("\n", at + 1)) lines += 1;
      if (++chunks % 20 === 0) {
        gc();
        peak = Math.max(peak, process.memoryUsage().heapUsed);
      }
    }
    assert.equal(first, "id,time,actor_kind,actor,token_id,client,action,target,outcome,detail");
    assert.equal(lines, 100_001);
    // The export is far larger than what the server held for it at any time.
    assert.ok(bytes > 10_000_000, `${bytes} bytes`);
    assert.ok(peak - base < bytes / 4, `heap grew ${((peak - base) / 1e6).toFixed(1)} MB for a ${(bytes / 1e6).toFixed(1)} MB export`);
  });

});

describe("audit retention", () => {
  const server = useTestServer({ audit: { retention_days: 30, max_rows: 1000 } });

  test("retention keeps max_rows and drops what is older than retention_days, in batches", async () => {
    await bulkRows(server, 12_000);
    const retention = server.server.domains.shared.auditRetention;
    await retention.sweep();
    const count = async () => Number((await server.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM audit_log"))?.n);
    assert.equal(await count(), 1000);
    const newestBefore = (await server.db.get<{ id: number }>("SELECT MAX(id) AS id FROM audit_log"))!.id;
    assert.equal((await server.db.get<{ id: number }>("SELECT MIN(id) AS id FROM audit_log"))!.id, newestBefore - 999, "the newest stay");
    server.clock.advance(31 * 86_400_000);
    await recordAudit(server.server.ctx.store.query, systemActor("later", new Date(server.clock.now())), "bulk.row", "row:late");
    await retention.sweep();
    assert.equal(await count(), 1);
  });
});

test("the CLI records its changes when no server runs on the data dir", async () => {
  const dir = tempDir();
  const server = await startTestServer({}, dir);
  await server.close();
  try {
    const passwordFile = join(dir, "pw");
    writeFileSync(passwordFile, "a long password\n");
    assert.equal((await runCli(["user", "add", "cleo", "--scopes", "svc_tests_ro", "--password-file", passwordFile, "--data-dir", dir])).code, 0);
    assert.equal((await runCli(["token", "revoke", "--user", "cleo", "--data-dir", dir])).code, 0);
    const again = await startTestServer({}, dir);
    try {
      const list = await entries(again, "target=user:cleo");
      assert.deepEqual(list.map((e) => [e.action, e.actor_kind, e.client]), [["token.revoke", "system", ""], ["user.add", "system", ""]]);
      assert.match(list[0].actor, /^cli:/);
    } finally {
      await again.close();
    }
  } finally {
    removeDir(dir);
  }
});
