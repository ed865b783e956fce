/*
 * Issue 29: the families audit.test.ts does not cover, each with its actor and target: a device's
 * key change, accounts (scopes, enable, delete; a console session as the actor, logout), actions
 * on many devices and the clearing of action logs and queues, device log deletion, Variant A's
 * abort and delete of a run, registrations removed.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { adminPassword, fromConsole, signIn } from "../accounts/helpers.ts";
import { approve, deviceClient, registerDevice } from "../update/helpers/devices.ts";
import { uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { entries, newest } from "./helpers.ts";

describe("more families in the audit log", () => {
  const server = useTestServer();

  test("device.key_change: the approved device's new key, both fingerprints, never a key", async () => {
    const { client, id } = await registerDevice(server);
    const replacement = deviceClient(server, { mac: client.mac });
    assert.equal((await replacement.authorize()).status, "pending");
    assert.equal((await approve(server, replacement, true)).status, 200);
    const change = await newest(server, "device.key_change");
    assert.deepEqual([change.actor, change.target, change.detail?.mac], ["admin", `device:${id}`, client.mac]);
    assert.notEqual(change.detail?.from, change.detail?.to);
    const all = JSON.stringify(await entries(server, `target=device:${id}`));
    for (const pem of [client.publicKeyPem, replacement.publicKeyPem]) assert.ok(!all.includes(pem.split("\n")[1]), "no public key in the log");
  });

  test("accounts: scopes, enable and delete; a console session acts as its account; logout", async () => {
    assert.equal((await server.call("POST", "/api/v1/users", { name: "wen", password: "a long password", scopes: ["svc_tests_ro"] })).status, 201);
    assert.equal((await server.call("PATCH", "/api/v1/users/wen", { scopes: ["svc_tests_rw"], disabled: true })).status, 200);
    assert.equal((await server.call("PATCH", "/api/v1/users/wen", { disabled: false })).status, 200);
    const cookie = await signIn(server, "admin", adminPassword(server));
    const headers = { ...fromConsole(server, cookie), "content-type": "application/json" };
    assert.equal((await server.request("/api/v1/users/wen", { method: "DELETE", headers })).status, 204);
    const list = await entries(server, "target=user:wen");
    assert.deepEqual(list.map((e) => e.action), ["user.delete", "user.enable", "user.disable", "user.scopes", "user.add"]);
    assert.deepEqual([list[0].actor_kind, list[0].actor], ["account", "admin"]);
    assert.deepEqual(list[3].detail, { scopes: "tests_rw" });
    assert.equal((await server.request("/api/v1/auth/logout", { method: "POST", headers })).status, 204);
    const logout = await newest(server, "logout");
    assert.deepEqual([logout.actor, logout.target], ["admin", "user:admin"]);
  });

  test("actions on many devices (action id and device count); clearing a device's queue and log, removing entries", async () => {
    const [one, two] = [await registerDevice(server), await registerDevice(server)];
    const ops = server.token(["admin_rw"], "ops");
    const fanOut = await server.call("POST", "/api/v2/devices/action/exec", { action_id: "uptime", devices: [one.client.mac, two.client.mac] }, ops);
    assert.equal(fanOut.status, 200, JSON.stringify(fanOut.body));
    const exec = await newest(server, "action.exec");
    assert.deepEqual([exec.actor, exec.detail?.action_id, exec.detail?.devices], ["ops", "uptime", 2]);
    const mac = one.client.mac;
    assert.equal((await server.call("DELETE", `/api/v2/devices/${mac}/action/pending`, undefined, ops)).status, 200);
    assert.equal((await server.call("DELETE", `/api/v2/devices/${mac}/action/log`, undefined, ops)).status, 200);
    assert.equal((await server.call("POST", `/api/v2/devices/${mac}/action/remove`, { actions: ["no-such-entry"] }, ops)).status, 200);
    const list = await entries(server, `target=device:${one.id}&action=action`);
    assert.deepEqual(list.map((e) => [e.action, e.actor, e.detail?.removed]), [["action.remove", "ops", 0], ["action.clear_log", "ops", 0], ["action.clear_pending", "ops", 1]]);
  });

  test("device logs deleted by a manager: the scope, the filter and how many went", async () => {
    const { id, token } = await registerDevice(server);
    const batch = [1, 2, 3].map((i) => ({ device_timestamp: "Wed, 02 Oct 2002 15:00:00 -0000", name: i === 3 ? "TEMP" : "CPU", entry: String(i) }));
    assert.equal((await server.request("/api/v1/logs", { method: "POST", token, json: { batch } })).status, 200);
    assert.equal((await server.call("DELETE", `/api/v1/logs/device/${id}?name=CPU`)).status, 200);
    const deleted = await newest(server, "log.delete");
    assert.deepEqual([deleted.target, deleted.detail], [`device:${id}`, { name: "CPU", removed: 2 }]);
    const [left] = (await server.call<Array<{ id: number }>>("GET", `/api/v1/logs/device/${id}`)).body;
    assert.equal((await server.call("DELETE", `/api/v1/logs/${left.id}`)).status, 200);
    assert.deepEqual((await newest(server, "log.delete")).detail, { log: left.id, removed: 1 });
  });

  test("Variant A: a run aborted, then deleted", async () => {
    await uploadConfig(server, "a-slow.yml", "tests:\n  g:\n  - sleep:\n      seconds: 30\n");
    const ops = server.token(["tests_rw"], "tess");
    const run = (await server.call<{ id: string }>("POST", "/api/v1/test-runs", { config_name: "a-slow.yml" }, ops)).body;
    await waitRun(server, run.id, (r) => r.status === "running");
    assert.equal((await server.call("DELETE", `/api/v1/test-runs/${run.id}`, undefined, ops)).status, 200);
    await waitRun(server, run.id);
    assert.equal((await server.call("DELETE", `/api/v1/test-runs/${run.id}/record`, undefined, ops)).status, 200);
    const list = await entries(server, `target=run:${run.id}`);
    assert.deepEqual(list.map((e) => [e.action, e.actor]), [["testrun.delete", "tess"], ["testrun.abort", "tess"], ["testrun.trigger", "tess"]]);
  });

  test("registrations removed, one and in bulk", async () => {
    const client = deviceClient(server);
    assert.equal((await client.authorize()).status, "pending");
    assert.equal((await server.request("/api/v1/auth/pending", { method: "DELETE", token: server.adminToken, json: { mac_address: client.mac, public_key: client.publicKeyPem } })).status, 200);
    assert.equal((await newest(server, "registration.remove")).target, `mac:${client.mac}`);
    assert.equal((await server.call("POST", "/api/v1/auth/pending/remove", { all: true })).status, 200);
    const bulk = await newest(server, "registration.remove");
    assert.deepEqual([bulk.target, bulk.detail?.all], ["registrations", true]);
  });

  test("no secret in any entry: passwords, tokens, session cookies", async () => {
    const cookie = await signIn(server, "admin", adminPassword(server));
    const { token } = await registerDevice(server);
    const all = JSON.stringify(await entries(server, "limit=1000"));
    const signature = (jwt: string) => jwt.split(".")[2];
    for (const secret of [adminPassword(server), "a long password", signature(server.adminToken), signature(token), signature(cookie.split("=")[1])]) {
      assert.ok(!all.includes(secret), `${secret.slice(0, 6)}... is in the log`);
    }
  });
});
