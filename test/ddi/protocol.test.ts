/*
 * hawkBit's DDI API with hand-made requests: targets created through the API, their tokens
 * replaced and revoked; unknown controllers, wrong tokens and malformed bodies get hawkBit's
 * error shape and change nothing; a poll opens an action from labgate's update check, feedback
 * drives the deployment as an agent's outcomes would, configData becomes device metadata and an
 * abort is offered as a cancel until the device acknowledges it.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const server = useTestServer({ update_server: { ddi: { tenant: "DEFAULT", polling_interval: 5 } } });

let targets = 0;
async function createTarget(deviceType = "qemu-swu"): Promise<{ controller_id: string; device_id: number; target_token: string }> {
  const controllerId = `swu-board-${++targets}`;
  const res = await server.call("POST", "/api/v1/ddi/targets", { controller_id: controllerId, name: `Board ${targets}`, device_type: deviceType });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

const ddi = (token: string | null, method: string, path: string, json?: unknown) =>
  fetch(`${server.url}/DEFAULT/controller/v1/${path}`, {
    method,
    headers: { ...(token === null ? {} : { authorization: `TargetToken ${token}` }), ...(json === undefined ? {} : { "content-type": "application/json" }) },
    body: json === undefined ? undefined : typeof json === "string" ? json : JSON.stringify(json),
  });

/** hawkBit's error body: exceptionClass, errorCode, message. */
async function ddiError(res: Response, status: number): Promise<string> {
  assert.equal(res.status, status);
  const body = (await res.json()) as Record<string, unknown>;
  assert.deepEqual(Object.keys(body).sort(), ["errorCode", "exceptionClass", "message"]);
  return body.message as string;
}

const feedback = (execution: string, finished: string, details: string[] = [], progress?: { cnt: number; of: number }) => ({
  id: 1,
  time: "20260101T000000",
  status: { execution, result: { finished, ...(progress ? { progress } : {}) }, details },
});

const device = async (id: number) => (await server.call("GET", `/api/v2/devices/${id}`)).body;

describe("DDI targets", () => {
  test("an admin creates a target: a device of protocol ddi and a token shown once; replaced and revoked", async () => {
    const t = await createTarget();
    assert.match(t.target_token, /^[\w-]{32}$/);
    const d = await device(t.device_id);
    assert.equal(d.mac_address, t.controller_id);
    assert.equal(d.metadata["svc.device.protocol"], "ddi");
    assert.equal(d.metadata["svc.hardware.devtype"], "qemu-swu");
    // As if its last contact were long ago: the poll below must be what moves it.
    await server.db.run("UPDATE devices SET last_access = ? WHERE id = ?", ["2020-01-01T00:00:00.000Z", t.device_id]);
    const first = await ddi(t.target_token, "GET", t.controller_id);
    assert.equal(first.status, 200, await first.clone().text());
    // A poll is the target's last access, as an agent's update check is: written lazily (on PostgreSQL on a connection of its own, so a read may come first).
    const recent = (d: { last_access?: string }) => d.last_access !== undefined && Math.abs(Date.parse(d.last_access) - Date.now()) < 60_000;
    await waitFor(async () => recent(await device(t.device_id)), 10_000, "the poll's last access");

    const again = await server.call("POST", "/api/v1/ddi/targets", { controller_id: t.controller_id, name: "x", device_type: "y" });
    assert.equal(again.status, 409);

    const replaced = await server.call("POST", `/api/v1/ddi/targets/${t.controller_id}/token`);
    assert.equal(replaced.status, 200);
    assert.notEqual(replaced.body.target_token, t.target_token);
    await ddiError(await ddi(t.target_token, "GET", t.controller_id), 401);
    assert.equal((await ddi(replaced.body.target_token, "GET", t.controller_id)).status, 200);

    assert.equal((await server.call("DELETE", `/api/v1/ddi/targets/${t.controller_id}/token`)).status, 200);
    await ddiError(await ddi(replaced.body.target_token, "GET", t.controller_id), 401);
    const view = await server.call("GET", `/api/v1/ddi/targets/${t.controller_id}`);
    assert.equal(view.body.token, "revoked");
    // A deleted device's target is refused at once, whatever token it holds.
    const other = await createTarget();
    assert.equal((await ddi(other.target_token, "GET", other.controller_id)).status, 200);
    assert.equal((await server.call("DELETE", `/api/v2/devices/${other.device_id}`)).status, 200);
    await ddiError(await ddi(other.target_token, "GET", other.controller_id), 401);
    assert.equal((await server.call("POST", "/api/v1/ddi/targets/nobody/token")).status, 404);
  });

  test("bad input to the management API is 400 and creates nothing", async () => {
    for (const body of [{}, { controller_id: "a b", name: "n", device_type: "t" }, { controller_id: "ok-1", name: "", device_type: "t" }, { controller_id: "ok-2", name: "n" }]) {
      const res = await server.call("POST", "/api/v1/ddi/targets", body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(typeof res.body.error, "string");
    }
    const all = (await server.call<any[]>("GET", "/api/v2/devices")).body;
    assert.ok(!all.some((d) => d.mac_address === "ok-1" || d.mac_address === "ok-2"));
  });

  test("an unknown controller, a wrong token, another tenant or scheme are 401 and change nothing", async () => {
    const t = await createTarget();
    const before = JSON.stringify(await device(t.device_id));
    await ddiError(await ddi(t.target_token, "GET", "no-such-board"), 401);
    await ddiError(await ddi("wrong", "GET", t.controller_id), 401);
    await ddiError(await ddi(null, "GET", t.controller_id), 401);
    await ddiError(await fetch(`${server.url}/OTHER/controller/v1/${t.controller_id}`, { headers: { authorization: `TargetToken ${t.target_token}` } }), 401);
    await ddiError(await fetch(`${server.url}/DEFAULT/controller/v1/${t.controller_id}`, { headers: { authorization: `Bearer ${t.target_token}` } }), 401);
    await ddiError(await ddi("wrong", "PUT", `${t.controller_id}/configData`, { data: { device_type: "evil" } }), 401);
    // The token is checked before the body is read: a malformed body without it is 401 too.
    await ddiError(await ddi("wrong", "POST", `${t.controller_id}/deploymentBase/1/feedback`, "{not json"), 401);
    await ddiError(await ddi(null, "PUT", `${t.controller_id}/configData`, { data: 1 }), 401);
    assert.equal(JSON.stringify(await device(t.device_id)), before);
  });

  test("configData: attributes are device metadata, device_type sets the device type, labgate's keys stay", async () => {
    const t = await createTarget();
    const poll = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    assert.equal(poll.config.polling.sleep, "00:00:05");
    assert.match(poll._links.configData.href, new RegExp(`/DEFAULT/controller/v1/${t.controller_id}/configData$`));
    const put = await ddi(t.target_token, "PUT", `${t.controller_id}/configData`, { id: "", time: "20260101T000000", status: { execution: "closed", result: { finished: "success" } }, data: { device_type: "imx8", serial: "42", "svc.device.protocol": "evil" } });
    assert.equal(put.status, 200);
    const d = await device(t.device_id);
    assert.equal(d.metadata.serial, "42");
    assert.equal(d.metadata["svc.hardware.devtype"], "imx8");
    assert.equal(d.metadata["svc.device.protocol"], "ddi");
    const next = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    assert.equal(next._links.configData, undefined);
    await ddiError(await ddi(t.target_token, "PUT", `${t.controller_id}/configData`, { data: { a: 1 } }), 400);
    await ddiError(await ddi(t.target_token, "PUT", `${t.controller_id}/configData`, "{not json"), 400);
  });
});

describe("DDI deployments", () => {
  test("a poll opens an action; feedback proceeds, closes with success: the deployment's outcome; the version is the installed one", async () => {
    const file = Buffer.from("an swu image\n");
    const pkg = await uploadOk(server, { token: server.adminToken, version: "swu-2", devtype: "qemu-swu", file });
    const t = await createTarget();
    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "ddi-boards" } })).body.id as number;
    assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
    assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [t.device_id], remove: [] })).status, 200);
    const created = await server.call("POST", "/api/v2/deployments", { group, version: "swu-2", phases: [100], success_percent: 100, error_percent: 100, retries: 0 });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const deployment = created.body.id as number;

    const poll = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    const href = poll._links.deploymentBase.href as string;
    const actionId = Number(/deploymentBase\/(\d+)/.exec(href)![1]);
    const base = (await (await fetch(href, { headers: { authorization: `TargetToken ${t.target_token}` } })).json()) as any;
    assert.equal(base.id, String(actionId));
    const [artifact] = base.deployment.chunks[0].artifacts;
    assert.equal(base.deployment.chunks[0].version, "swu-2");
    assert.equal(artifact.filename, "swu-2.swu");
    assert.equal(artifact.size, file.length);
    assert.deepEqual(artifact.hashes, { sha1: createHash("sha1").update(file).digest("hex"), md5: createHash("md5").update(file).digest("hex"), sha256: pkg.sha256 });
    const download = await fetch(artifact._links["download-http"].href, { headers: { authorization: `TargetToken ${t.target_token}` } });
    assert.equal(download.status, 200);
    assert.deepEqual(Buffer.from(await download.arrayBuffer()), file);
    // The same action while it is open.
    assert.equal(((await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any)._links.deploymentBase.href, href);

    const member = async () => (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body[0];
    const fb = (body: unknown) => ddi(t.target_token, "POST", `${t.controller_id}/deploymentBase/${actionId}/feedback`, body);
    assert.equal((await fb(feedback("proceeding", "none", ["Installing Update Chunk Artifacts."], { cnt: 0, of: 1 }))).status, 200);
    assert.equal((await member()).state, "downloading");
    await ddiError(await fb({ status: { execution: "exploded" } }), 400);
    await ddiError(await fb(feedback("closed", "none")), 400);
    assert.equal((await member()).state, "downloading");
    assert.equal((await fb(feedback("proceeding", "none", ["All Chunks Installed."], { cnt: 1, of: 1 }))).status, 200);
    assert.equal((await member()).state, "installing");
    assert.equal((await fb(feedback("closed", "success", ["Update Installed."]))).status, 200);
    assert.equal((await member()).state, "installed");
    assert.equal((await device(t.device_id)).metadata["svc.software.version"], "swu-2");
    await ddiError(await fb(feedback("closed", "success")), 409);
    await ddiError(await ddi(t.target_token, "GET", `${t.controller_id}/deploymentBase/999999`), 404);
    const after = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    assert.equal(after._links.deploymentBase, undefined);
    const view = await server.call("GET", `/api/v1/ddi/targets/${t.controller_id}`);
    assert.deepEqual([view.body.actions[0].state, view.body.actions[0].result], ["closed", "success"]);
  });

  test("closed with failure: a failed outcome with the details as output", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "swu-f", devtype: "qemu-fail" });
    const t = await createTarget("qemu-fail");
    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "ddi-fail" } })).body.id as number;
    await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [t.device_id], remove: [] });
    const deployment = (await server.call("POST", "/api/v2/deployments", { group, version: "swu-f", phases: [100], success_percent: 0, error_percent: 100, retries: 0 })).body.id as number;
    const poll = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    const actionId = Number(/deploymentBase\/(\d+)/.exec(poll._links.deploymentBase.href)![1]);
    const res = await ddi(t.target_token, "POST", `${t.controller_id}/deploymentBase/${actionId}/feedback`, feedback("closed", "failure", ["ERROR : handler raw failed", "ERROR : image too large"]));
    assert.equal(res.status, 200);
    const [m] = (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body;
    assert.equal(m.state, "failed");
    assert.match(m.output, /image too large/);
  });

  test("an aborted deployment is offered as a cancel until the device acknowledges it", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "swu-a", devtype: "qemu-abort" });
    const t = await createTarget("qemu-abort");
    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "ddi-abort" } })).body.id as number;
    await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
    await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [t.device_id], remove: [] });
    const deployment = (await server.call("POST", "/api/v2/deployments", { group, version: "swu-a", phases: [100], success_percent: 100, error_percent: 100, retries: 0 })).body.id as number;
    const poll = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    const actionId = Number(/deploymentBase\/(\d+)/.exec(poll._links.deploymentBase.href)![1]);
    await ddiError(await ddi(t.target_token, "GET", `${t.controller_id}/cancelAction/${actionId}`), 404);
    assert.equal((await server.call("POST", `/api/v2/deployments/${deployment}/abort`)).status, 200);

    const cancel = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    assert.equal(cancel._links.deploymentBase, undefined);
    assert.match(cancel._links.cancelAction.href, new RegExp(`/cancelAction/${actionId}$`));
    const body = (await (await ddi(t.target_token, "GET", `${t.controller_id}/cancelAction/${actionId}`)).json()) as any;
    assert.deepEqual(body, { id: String(actionId), cancelAction: { stopId: String(actionId) } });
    assert.equal((await ddi(t.target_token, "POST", `${t.controller_id}/cancelAction/${actionId}/feedback`, feedback("closed", "success", ["cancellation acknowledged."]))).status, 200);
    const after = (await (await ddi(t.target_token, "GET", t.controller_id)).json()) as any;
    assert.deepEqual(Object.keys(after._links).filter((k) => k !== "configData"), []);
    const view = await server.call("GET", `/api/v1/ddi/targets/${t.controller_id}`);
    assert.equal(view.body.actions[0].state, "canceled");
    const [m] = (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body;
    assert.equal(m.state, "aborted");
  });
});
