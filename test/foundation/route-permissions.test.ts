/*
 * The route x caller grid: every operation the server registers (its OpenAPI registry), called in
 * process through `app.request` by six callers, answers with the status class its row says. A new
 * route without a row fails here: its authorization is decided when it is added, not found later.
 *
 * Callers: no token; a device token; a management token without scopes ("nobody"); a read-only
 * one (svc_admin_ro); a token without scopes whose user holds every per-object permission on the
 * objects the request names ("holder"); an admin (every scope).
 * Classes: 401, 403, 404 (refused, or hidden: an object the caller may not read is not there for
 * it), 400 (the input is refused before anything else is decided: the request names nothing the
 * caller could be refused), ok (anything else below 500: allowed, and answered on its merits). A
 * 5xx fails the test whoever called.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { openApiPath } from "../../src/http/openapi.ts";
import { PERMISSIONS } from "../../src/update/permissions/schema.ts";
import { inProcessApp, type InProcessApp } from "../helpers/app.ts";

const CALLERS = ["none", "device", "nobody", "reader", "holder", "admin"] as const;
type Caller = (typeof CALLERS)[number];

/**
 * One row per operation (`METHOD /openapi/path`): the class each caller gets, in CALLERS order.
 * A request that may change something names objects made for that caller's request alone (an
 * admin's delete then answers as a delete, not as a 404 of what the holder deleted before).
 */
const GRID: Record<string, string> = {
  "GET /api/health": "ok ok ok ok ok ok",
  "GET /api/whoami": "401 ok ok ok ok ok",
  // Public routes that refuse an empty body whoever calls.
  "POST /api/v1/auth/login": "400 400 400 400 400 400",
  "POST /api/v1/auth/logout": "ok ok ok ok ok ok",
  "POST /api/v1/tokens/revoke": "401 401 403 403 403 ok",
  "GET /api/v1/users": "401 401 403 ok 403 ok",
  "GET /api/v1/cluster": "401 401 403 ok 403 ok",
  "POST /api/v1/cluster/actions": "401 401 403 403 403 400",
  "POST /api/v1/cluster/files": "401 401 403 403 403 400",
  // On the embedded engine there is no cluster to join: 404 for the admin too.
  "POST /api/v1/cluster/join": "401 401 403 403 403 404",
  "GET /api/v1/cluster/devices/{mac}/actions": "401 401 403 403 403 403",
  "POST /api/v1/cluster/test-shares": "401 401 403 403 403 400",
  "POST /api/v1/cluster/test-messages": "401 401 403 403 403 400",
  "PUT /api/v1/cluster/test-runs/{id}/devices/{mac}/artifacts/{path}": "401 401 403 403 403 403",
  "POST /api/v1/cluster/test-runs/{id}/devices/{mac}/power": "401 401 403 403 403 400",
  "POST /api/v1/users": "401 401 403 403 403 ok",
  "PATCH /api/v1/users/{name}": "401 401 403 403 403 ok",
  "DELETE /api/v1/users/{name}": "401 401 403 403 403 ok",
  "POST /api/v1/auth/device": "400 400 400 400 400 400",
  "GET /api/v1/auth/pending": "401 401 403 ok 403 ok",
  "POST /api/v1/auth/pending/remove": "401 401 403 403 403 400",
  "POST /api/v1/auth/register": "401 401 403 403 403 400",
  "POST /api/v1/auth/register/bulk": "401 401 403 403 403 400",
  "DELETE /api/v1/auth/pending": "401 401 403 403 403 ok",
  "GET /api/v2/devices": "401 401 ok ok ok ok",
  "GET /api/v2/devices/{id}": "401 401 404 ok ok ok",
  "DELETE /api/v2/devices/{id}": "401 401 403 403 ok ok",
  "PATCH /api/v2/devices/{id}": "401 401 403 403 ok ok",
  "POST /api/v2/devices/{id}/tag/{tag}": "401 401 403 403 ok ok",
  "DELETE /api/v2/devices/{id}/tag/{tag}": "401 401 403 403 ok ok",
  "GET /api/v2/devices/{id}/tags": "401 401 404 ok ok ok",
  "POST /api/devices/v1/authentication/auth_requests": "400 400 400 400 400 400",
  "PATCH /api/devices/v1/inventory/device/attributes": "401 400 401 401 401 401",
  "PUT /api/devices/v1/inventory/device/attributes": "401 400 401 401 401 401",
  "POST /api/devices/v2/deployments/device/deployments/next": "401 400 401 401 401 401",
  "GET /api/devices/v1/deployments/device/deployments/next": "401 400 401 401 401 401",
  "PUT /api/devices/v1/deployments/device/deployments/{id}/status": "401 400 401 401 401 401",
  "PUT /api/devices/v1/deployments/device/deployments/{id}/log": "401 400 401 401 401 401",
  // hawkBit's DDI API: a target token only (none of these callers has one).
  "GET /{tenant}/controller/v1/{controllerId}": "401 401 401 401 401 401",
  "GET /{tenant}/controller/v1/{controllerId}/deploymentBase/{actionId}": "401 401 401 401 401 401",
  "POST /{tenant}/controller/v1/{controllerId}/deploymentBase/{actionId}/feedback": "401 401 401 401 401 401",
  "GET /{tenant}/controller/v1/{controllerId}/cancelAction/{actionId}": "401 401 401 401 401 401",
  "POST /{tenant}/controller/v1/{controllerId}/cancelAction/{actionId}/feedback": "401 401 401 401 401 401",
  "PUT /{tenant}/controller/v1/{controllerId}/configData": "401 401 401 401 401 401",
  "POST /api/v1/ddi/targets": "401 401 403 403 403 400",
  "GET /api/v1/ddi/targets/{controllerId}": "401 401 403 404 403 404",
  "POST /api/v1/ddi/targets/{controllerId}/token": "401 401 403 403 403 404",
  "DELETE /api/v1/ddi/targets/{controllerId}/token": "401 401 403 403 403 404",
  "GET /api/v2/devices/versions": "401 401 ok ok ok ok",
  "GET /api/v2/deployments/{id}/timeline": "401 401 404 ok ok ok",
  "GET /api/v2/devices/{id}/console/ws": "401 401 404 ok ok ok",
  "GET /api/v2/devices/{id}/console-spans": "401 401 404 ok ok ok",
  "GET /api/v2/deployments/{id}/console-spans": "401 401 ok ok ok ok",
  "GET /api/v2/devices/{id}/update-history/{entry}/console": "401 401 404 404 404 404",
  "POST /api/v1/devices/test-runs/{id}/power": "401 400 401 401 401 401",
  "GET /api/v2/tags/{tag}": "401 401 ok ok ok ok",
  "GET /api/v1/devices": "401 401 403 ok 403 ok",
  "GET /api/v1/devices/{id}": "401 401 403 ok 403 ok",
  "DELETE /api/v1/devices/{id}": "401 401 403 403 403 ok",
  "POST /api/v1/permissions": "401 401 403 403 403 400",
  "GET /api/v1/permissions": "401 401 ok ok ok ok",
  "GET /api/v1/permissions/{id}": "401 401 403 403 403 ok",
  "DELETE /api/v1/permissions/{id}": "401 401 403 403 403 ok",
  "GET /api/v1/packages": "401 401 ok ok ok ok",
  "POST /api/v1/packages": "401 401 403 403 403 400",
  "GET /api/v1/packages/{id}": "401 401 404 ok ok ok",
  "GET /api/v1/packages/{id}/usage": "401 401 404 ok ok ok",
  "GET /api/v1/packages/deltas": "401 401 ok ok ok ok",
  "POST /api/v1/packages/{id}/delta": "401 401 403 403 403 400",
  "GET /api/v2/deployments/preflight": "401 401 400 400 400 400",
  "DELETE /api/v1/packages/{id}": "401 401 403 403 ok ok",
  "GET /api/v1/packages/{id}/download": "401 401 404 ok ok ok",
  // Signed links: without a signature, 403 whatever the token.
  "GET /local_storage/{path}": "403 403 403 403 403 403",
  "POST /api/v2/groups": "401 401 403 403 403 400",
  "GET /api/v2/groups": "401 401 ok ok ok ok",
  "POST /api/v2/groups/{id}/priority": "401 401 403 403 ok ok",
  "GET /api/v2/groups/{id}": "401 401 404 ok ok ok",
  "DELETE /api/v2/groups/{id}": "401 401 403 403 ok ok",
  "PATCH /api/v2/groups/{id}/devices": "401 401 403 403 ok ok",
  "POST /api/v2/groups/{id}/devices/matching": "401 401 403 403 ok ok",
  "POST /api/v2/groups/{id}/package": "401 401 403 403 ok ok",
  "POST /api/v2/groups/{id}/policy": "401 401 403 403 ok ok",
  "POST /api/v1/groups": "401 401 403 403 403 ok",
  "GET /api/v1/groups": "401 401 403 ok 403 ok",
  "GET /api/v1/groups/{id}": "401 401 403 ok 403 ok",
  "DELETE /api/v1/groups/{id}": "401 401 403 403 403 ok",
  "PATCH /api/v1/groups/{id}/devices": "401 401 403 403 403 ok",
  "POST /api/v1/groups/{id}/package": "401 401 403 403 403 ok",
  "POST /api/v1/groups/{id}/policy": "401 401 403 403 403 ok",
  "POST /api/v1/update/check": "401 400 401 401 401 401",
  "POST /api/v2/deployments": "401 401 403 403 ok ok",
  "GET /api/v2/deployments": "401 401 ok ok ok ok",
  "GET /api/v2/deployments/{id}": "401 401 404 ok ok ok",
  "GET /api/v2/deployments/{id}/devices": "401 401 404 ok ok ok",
  "POST /api/v2/deployments/{id}/pause": "401 401 404 403 ok ok",
  "POST /api/v2/deployments/{id}/resume": "401 401 404 403 ok ok",
  "POST /api/v2/deployments/{id}/abort": "401 401 404 403 ok ok",
  "POST /api/v2/deployments/{id}/advance": "401 401 404 403 ok ok",
  "POST /api/v2/deployments/{id}/retry": "401 401 404 403 ok ok",
  "GET /api/v2/devices/{id}/update-history": "401 401 404 ok ok ok",
  "GET /api/v2/devices/progress": "401 401 ok ok ok ok",
  "GET /api/v2/devices/{id}/progress": "401 401 404 404 404 404",
  // WebSocket routes: a device passes its auth check, then gets 426 for a request without an upgrade.
  "GET /api/v1/devices/ws": "401 ok 401 401 401 401",
  // A WebSocket route: the shell permission is checked on the upgrade (closed with 4003); a plain GET gets 426.
  "GET /api/v1/devices/{mac}/shell": "401 401 ok 403 ok ok",
  "GET /api/v1/devices/{mac}/shell/attach/{uuid}": "401 ok 401 401 401 401",
  "GET /api/v2/devices/{mac}/action/list": "401 401 404 ok ok ok",
  "GET /api/v2/devices/{mac}/action/exec/{action_id}": "401 401 404 403 ok ok",
  // A fan-out answers 200 with each device's own status (a device the caller may not see: 404 in its entry).
  "POST /api/v2/devices/action/exec": "401 401 ok ok ok ok",
  "GET /api/v2/devices/{mac}/action/log": "401 401 404 ok ok ok",
  "DELETE /api/v2/devices/{mac}/action/log": "401 401 404 403 ok ok",
  "DELETE /api/v2/devices/{mac}/action/pending": "401 401 404 403 ok ok",
  "POST /api/v2/devices/{mac}/action/remove": "401 401 404 403 ok ok",
  "POST /api/v2/devices/{id}/fs/file": "401 401 404 ok ok ok",
  "PUT /local_storage_multipart/parts/{part}": "403 403 403 403 403 403",
  "GET /local_storage_multipart/multipart/{path}": "403 403 403 403 403 403",
  "GET /api/stream": "401 401 ok ok ok ok",
  "POST /api/v1/logs": "401 400 401 401 401 401",
  "GET /api/v1/logs/device/{id}": "401 401 404 ok ok ok",
  "GET /api/v1/logs/group/{id}": "401 401 404 ok ok ok",
  "DELETE /api/v1/logs/device/{id}": "401 401 403 403 ok ok",
  // Group-wide: it deletes the entries of the devices the caller may update; a caller who may update none is refused.
  "DELETE /api/v1/logs/group/{id}": "401 401 404 403 ok ok",
  "GET /api/v1/logs/{id}": "401 401 404 ok ok ok",
  "DELETE /api/v1/logs/{id}": "401 401 404 403 ok ok",
  "GET /api/v2/devices/{id}/power": "401 401 404 ok ok ok",
  "POST /api/v2/devices/{id}/power/{action}": "401 401 403 403 ok ok",
  "GET /api/v2/reservations": "401 401 ok ok ok ok",
  "GET /api/v2/devices/{id}/reservation": "401 401 404 ok ok ok",
  "POST /api/v2/devices/{id}/reservation": "401 401 404 403 ok ok",
  "DELETE /api/v2/devices/{id}/reservation": "401 401 404 ok ok ok",
  "GET /api/v2/devices/{id}/console": "401 401 404 ok ok ok",
  "GET /api/v2/lab/boards": "401 401 403 ok 403 ok",
  "POST /api/v2/lab/boards": "401 401 403 403 403 400",
  "DELETE /api/v2/lab/boards/{device}": "401 401 403 403 403 404",
  "GET /api/v1/configs": "401 401 403 ok 403 ok",
  "POST /api/v1/configs": "401 401 403 403 403 400",
  "GET /api/v1/configs/{name}": "401 401 403 ok 403 ok",
  "GET /api/v1/configs/{name}/file": "401 401 403 ok 403 ok",
  "DELETE /api/v1/configs/{name}": "401 401 403 403 403 ok",
  "POST /api/v1/configs/{name}/push": "401 401 403 403 403 400",
  "GET /api/v1/configs/{name}/test-suites": "401 401 403 ok 403 ok",
  "GET /api/v1/configs/{name}/override-hints": "401 401 403 ok 403 ok",
  "GET /api/v1/test-runs": "401 401 403 ok 403 ok",
  "GET /api/v1/test-runs/stream": "401 401 403 ok 403 ok",
  "POST /api/v1/test-runs": "401 401 403 403 403 ok",
  "GET /api/v1/test-runs/trigger": "401 401 403 ok 403 ok",
  // No trigger, lab node, board or artifact exists in this world: 404 for those allowed, after the scope check.
  "GET /api/v1/test-runs/trigger/{tid}": "401 401 403 404 403 404",
  "DELETE /api/v1/test-runs/trigger/{tid}": "401 401 403 403 403 404",
  "GET /api/v1/test-runs/{id}": "401 401 403 ok 403 ok",
  "DELETE /api/v1/test-runs/{id}": "401 401 403 403 403 400",
  "DELETE /api/v1/test-runs/{id}/record": "401 401 403 403 403 ok",
  "POST /api/v1/test-runs/{id}/repeat": "401 401 403 403 403 400",
  "GET /api/v1/test-runs/{id}/report": "401 401 403 ok 403 ok",
  "GET /api/v1/test-runs/{id}/report/summary": "401 401 403 ok 403 ok",
  "GET /api/v1/test-runs/{id}/artifacts": "401 401 403 ok 403 ok",
  "GET /api/v1/test-runs/{id}/artifacts/{path}": "401 401 403 404 403 404",
  "GET /api/v1/test-runs/trigger/{tid}/results": "401 401 403 404 403 404",
  "GET /api/v1/test-runs/trigger/{tid}/results/{path}": "401 401 403 404 403 404",
  "PUT /api/v1/devices/test-runs/{id}/artifacts/{path}": "401 404 401 401 401 401",
  "GET /api/v1/test-targets": "401 401 403 ok 403 ok",
  "GET /api/v1/configs/{name}/history": "401 401 403 ok 403 ok",
  "GET /api/v1/test-nodes": "401 401 403 ok 403 ok",
  "GET /api/v1/test-nodes/status": "401 401 403 ok 403 ok",
  "GET /api/v1/test-nodes/{node}/test-runs/{id}": "401 401 403 404 403 404",
  "GET /api/v1/test-nodes/{node}/test-runs/{id}/report": "401 401 403 404 403 404",
  "GET /api/v1/test-nodes/{node}/test-runs/{id}/artifacts": "401 401 403 404 403 404",
  "GET /api/v1/test-nodes/{node}/test-runs/{id}/artifacts/{path}": "401 401 403 404 403 404",
  "POST /api/v1/backup": "401 401 403 403 403 ok",
  "GET /api/v1/audit": "401 401 403 ok 403 ok",
  "GET /api/openapi.json": "ok ok ok ok ok ok",
  "GET /": "ok ok ok ok ok ok",
  "GET /console/{name}": "404 404 404 404 404 404",
};

/** Request bodies, by operation: valid ones where a per-object check follows the parse, so that what decides is the caller. */
const BODIES: Record<string, (w: World) => unknown> = {
  "POST /api/v1/tokens/revoke": (w) => ({ user: `nobody-${w.serial}` }),
  "POST /api/v1/users": (w) => ({ name: `grid-user-${w.serial}`, password: "a long grid password", scopes: [] }),
  "PATCH /api/v2/devices/{id}": (w) => ({ name: `renamed-${w.serial}` }),
  "POST /api/v2/groups/{id}/priority": () => ({ priority: 5 }),
  "PATCH /api/v2/groups/{id}/devices": (w) => ({ add: [], remove: [w.device] }),
  "PATCH /api/v1/groups/{id}/devices": (w) => ({ add: [], remove: [w.device] }),
  "POST /api/v2/groups/{id}/devices/matching": (w) => ({ q: `grid-${w.serial}` }),
  "POST /api/v2/groups/{id}/package": (w) => ({ packages: [w.package] }),
  "POST /api/v1/groups/{id}/package": (w) => ({ packages: [w.package] }),
  "POST /api/v2/groups/{id}/policy": () => ({ policy: "no_update," }),
  "POST /api/v1/groups/{id}/policy": () => ({ policy: "no_update," }),
  "POST /api/v2/deployments": (w) => ({ group: w.group, version: `v${w.serial}` }),
  "POST /api/v2/devices/action/exec": (w) => ({ action_id: "grid", devices: [w.mac] }),
  "POST /api/v2/devices/{mac}/action/remove": () => ({ actions: [] }),
  "POST /api/v2/devices/{id}/fs/file": () => ({ file: "/etc/hostname" }),
  "POST /api/v2/devices/{id}/reservation": () => ({ minutes: 5 }),
  "POST /api/v1/test-runs": (w) => ({ config_name: w.config }),
};

/** Paths of operations that remove a shared object: they name one of their own, made for them. */
const PATHS: Record<string, () => string> = {
  "DELETE /api/v1/configs/{name}": () => "/api/v1/configs/gone.yml",
  "DELETE /api/v1/test-runs/{id}/record": () => `/api/v1/test-runs/${goneRun}/record`,
};

interface World {
  /** Tells the objects of one world from another's (names that must be new). */
  serial: number;
  device: number;
  mac: string;
  group: number;
  package: number;
  tag: string;
  /** The holder's first permission (read on the device). */
  permission: number;
  log: number;
  deployment: number;
  config: string;
  run: string;
  trigger: string;
  user: string;
}

const OBJECT = ["read", "update", "delete"] as const;

let app: InProcessApp;
let tokens: Record<Exclude<Caller, "none">, string>;
let shared: World;
let made = 0;

/** An admin's request that must succeed; its JSON answer. */
async function admin<T>(method: string, path: string, json?: unknown, body?: BodyInit): Promise<T> {
  const res = await app.request(method, path, { token: app.adminToken, json, body });
  const text = await res.text();
  assert.ok(res.status < 300, `${method} ${path}: ${res.status} ${text}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

/**
 * A device (as a registration leaves it) with a tag and a log entry, a package, a group holding
 * both, and, when asked, a deployment to that group; the holder gets every permission on each.
 */
async function objects(withDeployment: boolean, withPackage = true): Promise<Omit<World, "config" | "run" | "trigger" | "user">> {
  const serial = ++made;
  const mac = `02:00:00:00:${(serial >> 8).toString(16).padStart(2, "0")}:${(serial & 255).toString(16).padStart(2, "0")}`;
  const now = new Date(app.clock.now()).toISOString();
  await app.db.write(async (tx) => {
    await tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata, last_access) VALUES (?, ?, ?, '{}', '{}', ?)", [now, `grid-${serial}`, mac, now]);
  });
  const device = (await app.db.get<{ id: number }>("SELECT id FROM devices WHERE mac_address = ?", [mac]))!.id;
  const tag = `grid-tag-${serial}`;
  await admin("POST", `/api/v2/devices/${device}/tag/${tag}`);
  const deviceToken = app.ctx.tokens.issueDevice(mac, device, 3600);
  const logged = await app.request("POST", "/api/v1/logs", { token: deviceToken, json: { batch: [{ device_timestamp: "Wed, 02 Oct 2002 15:00:00 -0000", name: "grid", entry: "grid" }] } });
  assert.ok(logged.status < 300, await logged.text());
  const log = (await app.db.get<{ id: number }>("SELECT id FROM device_logs WHERE device_id = ? ORDER BY id DESC LIMIT 1", [device]))!.id;
  const form = new FormData();
  form.set("svc.software.version", `v${serial}`);
  form.set("svc.hardware.devtype", "board");
  form.set("file", new Blob([new Uint8Array(Buffer.from(`package ${serial}`))]), "pkg.bin");
  const pkg = withPackage ? (await admin<{ id: number }>("POST", "/api/v1/packages", undefined, form)).id : shared.package;
  const group = (await admin<{ id: number }>("POST", "/api/v2/groups", { metadata: { "svc.group.name": `grid-${serial}` } })).id;
  await admin("PATCH", `/api/v2/groups/${group}/devices`, { add: [device], remove: [] });
  if (withPackage) await admin("POST", `/api/v2/groups/${group}/package`, { packages: [pkg] });
  // Shell, test and power are permissions on devices only.
  await app.db.write(async (tx) => {
    const owned = [["device", device, PERMISSIONS], ["group", group, OBJECT], ...(withPackage ? [["package", pkg, OBJECT] as const] : [])] as const;
    for (const [resource, id, permissions] of owned) {
      for (const permission of permissions) await tx.run("INSERT INTO permissions (created, user_id, resource, resource_id, permission) VALUES (?, 'holder', ?, ?, ?)", [now, resource, id, permission]);
    }
  });
  const permission = (await app.db.get<{ id: number }>("SELECT id FROM permissions WHERE user_id = 'holder' AND resource = 'device' AND resource_id = ? ORDER BY id LIMIT 1", [device]))!.id;
  const deployment = withDeployment ? (await admin<{ id: number }>("POST", "/api/v2/deployments", { group, version: `v${serial}` })).id : 0;
  return { serial, device, mac, group, package: pkg, tag, permission, log, deployment };
}

/** Uploads a config of one quick test. */
async function uploadConfig(name: string): Promise<void> {
  const form = new FormData();
  form.append("file", new Blob(["tests:\n  g:\n  - sleep:\n      seconds: 0\n"], { type: "application/yaml" }), name);
  await admin("POST", "/api/v1/configs", undefined, form);
}

before(async () => {
  app = await inProcessApp();
  const first = await objects(true);
  tokens = {
    device: app.ctx.tokens.issueDevice(first.mac, first.device, 3600),
    nobody: app.token([], "nobody"),
    reader: app.token(["admin_ro"], "reader"),
    holder: app.token([], "holder"),
    admin: app.adminToken,
  };
  await uploadConfig("grid.yml");
  await uploadConfig("gone.yml");
  const run = await admin<{ id: string }>("POST", "/api/v1/test-runs", { config_name: "grid.yml" });
  const gone = await admin<{ id: string }>("POST", "/api/v1/test-runs", { config_name: "gone.yml" });
  for (const id of [run.id, gone.id]) await app.domains.testRun.runs.waitForEnd(String(id), 15_000);
  const triggers = await admin<Array<{ id: string }>>("GET", "/api/v1/test-runs/trigger");
  await admin("POST", "/api/v1/users", { name: "grid-user", password: "a long grid password", scopes: [] });
  shared = { ...first, config: "grid.yml", run: String(run.id), trigger: String(triggers[0]?.id ?? "none"), user: "grid-user" };
  goneRun = String(gone.id);
});

let goneRun = "";

after(async () => {
  await app?.close();
});

/** The concrete path of an operation's OpenAPI path for the objects of `w`. */
function pathOf(path: string, w: World): string {
  const values: Array<[RegExp, string]> = [
    [/^\/api\/v1\/logs\/device\/\{id\}/, `/api/v1/logs/device/${w.device}`],
    [/^\/api\/v1\/logs\/group\/\{id\}/, `/api/v1/logs/group/${w.group}`],
    [/^\/api\/v1\/logs\/\{id\}/, `/api/v1/logs/${w.log}`],
    [/^\/api\/v\d\/devices\/\{id\}/, `/api/v${path[6]}/devices/${w.device}`],
    [/^\/api\/v\d\/groups\/\{id\}/, `/api/v${path[6]}/groups/${w.group}`],
    [/^\/api\/v1\/packages\/\{id\}/, `/api/v1/packages/${w.package}`],
    [/^\/api\/v2\/deployments\/\{id\}/, `/api/v2/deployments/${w.deployment}`],
    [/^\/api\/v1\/permissions\/\{id\}/, `/api/v1/permissions/${w.permission}`],
    [/^\/api\/v1\/configs\/\{name\}/, `/api/v1/configs/${w.config}`],
    [/^\/api\/v1\/users\/\{name\}/, `/api/v1/users/${w.user}`],
    [/^\/api\/v1\/test-runs\/trigger\/\{tid\}/, `/api/v1/test-runs/trigger/${w.trigger}`],
    [/^\/api\/v1\/test-runs\/\{id\}/, `/api/v1/test-runs/${w.run}`],
    [/^\/api\/v1\/devices\/test-runs\/\{id\}/, `/api/v1/devices/test-runs/${w.run}`],
  ];
  let concrete = path;
  for (const [pattern, value] of values) concrete = concrete.replace(pattern, value);
  return concrete
    .replace("{mac}", w.mac)
    .replace("{tag}", w.tag)
    .replace("{device}", w.mac)
    .replace("{node}", "node-1")
    .replace("{entry}", "1")
    .replace("{id}", "1")
    .replace("{uuid}", "00000000-0000-0000-0000-000000000000")
    .replace("{action_id}", "grid")
    .replace("{action}", "cycle")
    .replace("{part}", "grid")
    .replace("{name}", "grid")
    .replace("{path}", "grid.txt");
}

const classOf = (status: number): string => (status === 401 || status === 403 || status === 404 || status === 400 ? String(status) : status < 500 ? "ok" : `${status}`);

test("every operation answers each caller with the status class of its row (401/403/404 refused, 400 input, ok allowed)", async () => {
  const operations = app.operations.map((op) => `${op.method.toUpperCase()} ${op.path}`);
  assert.ok(operations.length > 100, `only ${operations.length} operations`);
  // A route registered without its operation would be missing from the grid too.
  const routes = app.app.routes.filter((r) => ["GET", "POST", "PUT", "PATCH", "DELETE"].includes(r.method)).map((r) => `${r.method} ${openApiPath(r.path)}`);
  assert.deepEqual([...new Set(routes.filter((r) => !operations.includes(r)))], [], "routes without an operation in the registry");
  const observed = new Map<string, string>();
  const statuses = new Map<string, string>();
  const errors: string[] = [];
  for (const op of operations) {
    const [method, path] = op.split(" ");
    const classes: string[] = [];
    const seen: number[] = [];
    // A request that may change something gets objects of its own; a refused one changed nothing, so the next caller may have them.
    let w = shared;
    let used = true;
    for (const caller of CALLERS) {
      const deploys = path.startsWith("/api/v2/deployments");
      if (method !== "GET" && used) w = { ...shared, ...(await objects(deploys && path !== "/api/v2/deployments", deploys || path.includes("/packages"))) };
      const body = BODIES[op]?.(w) ?? (method === "GET" || method === "DELETE" ? undefined : {});
      const answer = app.request(method, PATHS[op]?.() ?? pathOf(path, w), { token: caller === "none" ? undefined : tokens[caller], json: body });
      const res = await Promise.race([answer, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${op} as ${caller}: no answer in 5 s`)), 5000).unref())]);
      // An event stream stays open: its status and headers are the answer.
      const text = /event-stream/.test(res.headers.get("content-type") ?? "") ? (await res.body?.cancel(), "") : await res.text();
      const cls = classOf(res.status);
      if (res.status >= 500) errors.push(`${op} as ${caller}: ${res.status} ${text.slice(0, 200)}`);
      classes.push(cls);
      seen.push(res.status);
      used = cls === "ok";
    }
    observed.set(op, classes.join(" "));
    statuses.set(op, seen.join(" "));
  }
  assert.deepEqual(errors, [], "no caller gets a 5xx");
  const missing = operations.filter((op) => !(op in GRID));
  const stale = Object.keys(GRID).filter((op) => !operations.includes(op));
  assert.deepEqual(stale, [], "rows of operations that are no more");
  assert.deepEqual(missing, [], `operations without a row (what they answer now):\n${missing.map((op) => `  "${op}": "${observed.get(op)}", // ${statuses.get(op)}`).join("\n")}`);
  const wrong = operations.filter((op) => GRID[op] !== observed.get(op)).map((op) => `${op}: expected ${GRID[op]}, got ${observed.get(op)} (${statuses.get(op)})`);
  assert.deepEqual(wrong, []);
});
