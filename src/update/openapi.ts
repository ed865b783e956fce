/*
 * The update server's operations for the OpenAPI document (src/http/openapi.ts), by area.
 * Request bodies are the schemas the handlers validate with; response shapes
 * name the fields clients rely on (objects may carry more).
 */
import * as z from "zod";
import type { Config } from "../config/config.ts";
import { Empty, errors, ok, type Operation, type Reply } from "../http/openapi.ts";
import { logBatchBody, logDeleteQuery, logFilterQuery as logFilter, MAX_NAME } from "./logs/logs.ts";
import { registerBody, pendingBody, pendingListQuery, pendingRemoveBody } from "./registration/routes.ts";
import { fileRequestBody } from "./devicefiles/routes.ts";
import { execManyBody, removeActionsBody } from "./actions/routes.ts";
import { permissionBody } from "./permissions/store.ts";
import { deviceAuthBody } from "./registration/authorize.ts";
import { checkBodySchema } from "./updatecheck/check.ts";
import { deviceListQuery, deviceRenameBody } from "./devices/routes.ts";
import { groupDevicesBody, groupPackagesBody, groupPolicyBody, groupPriorityBody } from "./groups/routes.ts";
import { deploymentCreateBody, deploymentDevicesQuery, deploymentListQuery, historyQuery } from "./deployments/routes.ts";
import { DEVICE_STATES, STATUSES } from "./deployments/model.ts";

const date = z.string().describe("RFC 822, e.g. Sat, 21 Nov 2026 07:12:31 GMT");
const anyObject = z.record(z.string(), z.unknown());

const Device = z
  .looseObject({
    id: z.int(),
    name: z.string(),
    mac_address: z.string(),
    capabilities: anyObject,
    metadata: anyObject,
    last_access: date.nullable(),
    public_key: z.string().nullable(),
  })
  .meta({ id: "Device" });
const DeviceV2 = Device.extend({ groups: z.array(z.int()), connected: z.boolean() }).meta({ id: "DeviceV2" });
const DeviceV1 = Device.extend({ group: z.int().nullable() }).meta({ id: "DeviceV1" });
const Group = z
  .looseObject({ id: z.int(), created: date, packages: z.array(z.int()), devices: z.array(z.int()), metadata: anyObject, policy: z.string() })
  .meta({ id: "Group" });
const GroupV2 = Group.extend({ priority: z.int() }).meta({ id: "GroupV2" });
const Permission = z
  .object({
    id: z.int(),
    created: date,
    resource: z.string(),
    resource_id: z.int().nullable(),
    resource_name: z.string().nullable(),
    user_id: z.string(),
    permission: z.string(),
  })
  .meta({ id: "Permission" });
const Pending = z
  .object({
    mac_address: z.string(),
    public_key: z.string(),
    metadata: anyObject,
    last_appeared: date,
    key_fingerprint: z.string().optional().describe("with details=true: SHA-256 of the key (SPKI DER), hex"),
    key_change: z.boolean().optional().describe("with details=true: approving it replaces the key of an existing device"),
    device_id: z.int().nullable().optional().describe("with details=true: that device, else null"),
    device_key_fingerprint: z.string().nullable().optional().describe("with details=true: that device's current key fingerprint, else null"),
  })
  .meta({ id: "PendingRegistration" });
const Progress = z.looseObject({ id: z.int(), progress: z.int() }).meta({ id: "Progress" });
const ActionLogEntry = z
  .looseObject({ id: z.string(), action: z.string(), created: z.string(), status: z.string(), status_code: z.int().nullable() })
  .meta({ id: "ActionLogEntry" });
const Log = z
  .object({ id: z.int(), created: date, device_id: z.int(), device_timestamp: date, name: z.string().max(MAX_NAME), entry: z.string() })
  .meta({ id: "Log" });
const StateCounts = z.object(Object.fromEntries(DEVICE_STATES.map((s) => [s, z.int()]))).meta({ id: "DeploymentStateCounts" });
const Deployment = z
  .looseObject({
    id: z.int(),
    group: z.int(),
    version: z.string(),
    status: z.enum(STATUSES),
    pause_reason: z.string().nullable(),
    current_phase: z.int().describe("index of the last started phase; -1 before the start time"),
    gate: z.enum(["go", "wait", "stuck"]).nullable().describe("the current phase's success gate (stuck: a person decides with advance)"),
    window_open: z.boolean(),
    devices: z.int(),
    counts: StateCounts,
    phases: z.array(z.looseObject({ index: z.int(), until: z.int(), devices: z.int(), started: date.nullable(), succeeded: z.int(), counts: StateCounts })),
    success_percent: z.number().nullable(),
    success_wait_minutes: z.int().nullable(),
    error_percent: z.number().nullable(),
    device_timeout_minutes: z.int(),
    start_at: date.nullable(),
    window: anyObject.nullable(),
    created: date,
    created_by: z.string().nullable(),
    validation: z.object({ config: z.string(), suite: z.string() }).nullable().describe("the test run each installed device must pass (docs/device-tests.md)"),
    started: date.nullable(),
    finished: date.nullable(),
  })
  .meta({ id: "Deployment" });
const DeploymentDevice = z
  .looseObject({
    device: z.int(),
    mac_address: z.string(),
    name: z.string(),
    phase: z.int(),
    position: z.int(),
    state: z.enum(DEVICE_STATES),
    progress: z.int().nullable(),
    from_version: z.string().nullable(),
    to_version: z.string().nullable(),
    reason: z.string().nullable(),
    output: z.string().nullable().describe("the last 4 KiB of the install command's output, for a failure"),
    offered: date.nullable(),
    updated: date,
  })
  .meta({ id: "DeploymentDevice" });
const UpdateHistory = z
  .looseObject({ id: z.int(), deployment: z.int().nullable(), from_version: z.string().nullable(), to_version: z.string(), outcome: z.string(), reason: z.string().nullable(), at: date })
  .meta({ id: "UpdateHistoryEntry" });
const list = (item: z.ZodType) => z.array(item);
const TOTAL = { "X-Total-Count": "with limit, offset or q: how many devices match before paging" };
const LOG_TOTAL = { "X-Total-Count": "how many entries match before paging" };


type Spec = Omit<Operation, "tag">;
const tagged = (tag: string, ops: Spec[]): Operation[] => ops.map((op) => ({ ...op, tag }));
const reply = (json: z.ZodType, description = "OK"): Reply => ({ description, json });
const { 400: e400, 401: e401, 403: e403, 404: e404, 409: e409, 413: e413, 422: e422, 429: e429 } = errors;
const mgmtRead = { 401: e401, 403: e403, 404: e404 };
const mgmtWrite = { 400: e400, 401: e401, 403: e403, 404: e404 };

export function updateOperations(config: Config): Operation[] {
  return [
    ...tagged("registration", [
      {
        method: "post",
        path: "/api/v1/auth/device",
        access: "public",
        summary: "A device asks for a token (signed body, X-<prefix>-Device-Signature header)",
        body: { json: deviceAuthBody(config.prefix) },
        responses: { 200: reply(z.object({ token: z.string(), expires: z.int() })), 400: e400, 401: e401 },
      },
      {
        method: "get",
        path: "/api/v1/auth/pending",
        access: "management",
        summary: "Pending registrations, oldest first (paged with limit/offset: X-Total-Count); expired ones are not listed",
        query: pendingListQuery,
        responses: { 200: { ...reply(list(Pending)), headers: TOTAL }, ...mgmtRead },
      },
      {
        method: "post",
        path: "/api/v1/auth/pending/remove",
        access: "management",
        summary: "Drop pending registrations in bulk: all, from one client address and/or older than some seconds",
        body: { json: pendingRemoveBody },
        responses: { 200: reply(z.object({ removed: z.int() })), ...mgmtWrite },
      },
      {
        method: "post",
        path: "/api/v1/auth/register",
        access: "management",
        summary: "Approve a pending registration",
        body: { json: registerBody },
        responses: { 200: ok(), ...mgmtWrite, 409: e409 },
      },
      { method: "delete", path: "/api/v1/auth/pending", access: "management", summary: "Drop a pending registration", body: { json: pendingBody }, responses: { 200: ok(), ...mgmtWrite } },
    ]),
    ...tagged("devices", [
      {
        method: "get",
        path: "/api/v2/devices",
        access: "management",
        summary: "Devices the caller may read (paged with limit/offset/q: X-Total-Count)",
        query: deviceListQuery,
        responses: { 200: { ...reply(list(DeviceV2)), headers: TOTAL }, 400: e400, 401: e401 },
      },
      { method: "get", path: "/api/v2/devices/{id}", access: "management", summary: "One device", responses: { 200: reply(DeviceV2), ...mgmtRead } },
      { method: "delete", path: "/api/v2/devices/{id}", access: "management", summary: "Delete a device and what depends on it", responses: { 200: ok(), ...mgmtRead } },
      {
        method: "patch",
        path: "/api/v2/devices/{id}",
        access: "management",
        summary: "Rename a device (needs update, and every permission the new name would grant anyone)",
        body: { json: deviceRenameBody },
        responses: { 200: reply(DeviceV2), ...mgmtWrite },
      },
      { method: "post", path: "/api/v2/devices/{id}/tag/{tag}", access: "management", summary: "Tag a device (needs update, and every permission the tag would grant anyone)", responses: { 200: ok(), ...mgmtWrite } },
      { method: "delete", path: "/api/v2/devices/{id}/tag/{tag}", access: "management", summary: "Untag a device", responses: { 200: ok(), ...mgmtWrite } },
      { method: "get", path: "/api/v2/devices/{id}/tags", access: "management", summary: "A device's tags", responses: { 200: reply(list(z.string())), ...mgmtRead } },
      { method: "get", path: "/api/v2/tags/{tag}", access: "management", summary: "Devices with a tag", responses: { 200: reply(list(DeviceV2)), 400: e400, 401: e401 } },
      {
        method: "get",
        path: "/api/v1/devices",
        access: "management",
        summary: "All devices (v1; paged with limit/offset/q: X-Total-Count)",
        query: deviceListQuery,
        responses: { 200: { ...reply(list(DeviceV1)), headers: TOTAL }, 400: e400, 401: e401, 403: e403 },
      },
      { method: "get", path: "/api/v1/devices/{id}", access: "management", summary: "One device (v1)", responses: { 200: reply(DeviceV1), ...mgmtRead } },
      { method: "delete", path: "/api/v1/devices/{id}", access: "management", summary: "Delete a device (v1)", responses: { 200: ok(), ...mgmtRead } },
    ]),
    ...tagged("permissions", [
      {
        method: "post",
        path: "/api/v1/permissions",
        access: "management",
        summary: "Grant a permission",
        body: { json: permissionBody },
        responses: { 200: reply(Permission), ...mgmtWrite, 409: e409, 422: e422 },
      },
      { method: "get", path: "/api/v1/permissions", access: "management", summary: "Permissions (admins: all; others: their own)", responses: { 200: reply(list(Permission)), 401: e401 } },
      { method: "get", path: "/api/v1/permissions/{id}", access: "management", summary: "One permission", responses: { 200: reply(Permission), ...mgmtRead } },
      { method: "delete", path: "/api/v1/permissions/{id}", access: "management", summary: "Revoke a permission", responses: { 200: ok(), ...mgmtRead } },
    ]),
    ...tagged("packages", [
      {
        method: "get",
        path: "/local_storage/{path}",
        access: "public",
        summary: "A package object through a signed link (Range supported)",
        responses: { 200: { description: "The file", media: "application/octet-stream" }, 206: { description: "Part of the file", media: "application/octet-stream" }, 404: e404 },
      },
    ]),
    ...tagged("groups", [
      ...(["v1", "v2"] as const).flatMap((v): Spec[] => {
        const G = v === "v2" ? GroupV2 : Group;
        const base = `/api/${v}/groups`;
        return [
          {
            method: "post",
            path: base,
            access: "management",
            summary: `Create a group (${v})`,
            body: { json: z.looseObject({ metadata: anyObject, ...(v === "v2" ? { priority: z.int().optional() } : {}) }) },
            responses: { 200: reply(G), ...mgmtWrite, 409: e409 },
          },
          { method: "get", path: base, access: "management", summary: `Groups (${v})`, responses: { 200: reply(list(G)), 401: e401, 403: e403 } },
          { method: "get", path: `${base}/{id}`, access: "management", summary: `One group (${v})`, responses: { 200: reply(G), ...mgmtRead } },
          { method: "delete", path: `${base}/{id}`, access: "management", summary: `Delete a group (${v})`, responses: { 200: ok(), ...mgmtRead, 409: e409 } },
          {
            method: "patch",
            path: `${base}/{id}/devices`,
            access: "management",
            summary: `Add and remove member devices (${v})`,
            body: { json: groupDevicesBody },
            responses: { 200: ok(), ...mgmtWrite, 409: e409 },
          },
          {
            method: "post",
            path: `${base}/{id}/package`,
            access: "management",
            summary: `Set the group's packages (${v})`,
            body: { json: groupPackagesBody },
            responses: { 200: ok(), ...mgmtWrite, 409: e409 },
          },
          { method: "post", path: `${base}/{id}/policy`, access: "management", summary: `Set the update policy (${v})`, body: { json: groupPolicyBody }, responses: { 200: ok(), ...mgmtWrite } },
        ];
      }),
      {
        method: "post",
        path: "/api/v2/groups/{id}/priority",
        access: "management",
        summary: "Set the group's priority",
        body: { json: groupPriorityBody },
        responses: { 200: ok(), ...mgmtWrite, 409: e409 },
      },
    ]),
    ...tagged("updates", [
      {
        method: "post",
        path: "/api/v1/update/check",
        access: "device",
        summary: "A device asks for an update (its metadata in the body)",
        body: { json: checkBodySchema(config.prefix) },
        responses: {
          200: reply(z.object({ id: z.int(), created: date, sha256: z.string(), uri: z.string(), version: z.string() }), "An update"),
          204: { description: "No update" },
          400: e400,
          401: e401,
          403: e403,
        },
      },
      { method: "get", path: "/api/v2/devices/progress", access: "management", summary: "Devices that are updating", responses: { 200: reply(list(Progress)), 401: e401 } },
      { method: "get", path: "/api/v2/devices/{id}/progress", access: "management", summary: "One device's update progress", responses: { 200: reply(Progress), ...mgmtRead } },
      {
        method: "get",
        path: "/api/v2/devices/{id}/update-history",
        access: "management",
        summary: "A device's update history, newest first (X-Total-Count)",
        query: historyQuery,
        responses: { 200: reply(list(UpdateHistory)), 400: e400, ...mgmtRead },
      },
    ]),
    ...tagged("deployments", [
      {
        method: "post",
        path: "/api/v2/deployments",
        access: "management",
        summary: "Roll a version out to a group in phases (update on the group)",
        body: { json: deploymentCreateBody },
        responses: { 201: reply(Deployment, "Created"), ...mgmtWrite, 409: e409 },
      },
      { method: "get", path: "/api/v2/deployments", access: "management", summary: "Deployments of the groups the caller may read, newest first (X-Total-Count)", query: deploymentListQuery, responses: { 200: reply(list(Deployment)), 400: e400, 401: e401 } },
      { method: "get", path: "/api/v2/deployments/{id}", access: "management", summary: "One deployment with its counts per state and per phase", responses: { 200: reply(Deployment), ...mgmtRead } },
      {
        method: "get",
        path: "/api/v2/deployments/{id}/devices",
        access: "management",
        summary: "A deployment's devices in their recorded order, with states and failure reasons (X-Total-Count)",
        query: deploymentDevicesQuery,
        responses: { 200: reply(list(DeploymentDevice)), 400: e400, ...mgmtRead },
      },
      { method: "post", path: "/api/v2/deployments/{id}/pause", access: "management", summary: "No new offers until resumed", responses: { 200: reply(Deployment), ...mgmtWrite, 409: e409 } },
      { method: "post", path: "/api/v2/deployments/{id}/resume", access: "management", summary: "Offers again", responses: { 200: reply(Deployment), ...mgmtWrite, 409: e409 } },
      { method: "post", path: "/api/v2/deployments/{id}/abort", access: "management", summary: "No more offers; downloads are told to stop; the group's policy stays", responses: { 200: reply(Deployment), ...mgmtWrite, 409: e409 } },
      { method: "post", path: "/api/v2/deployments/{id}/advance", access: "management", summary: "Start the next phase now, whatever its gate says", responses: { 200: reply(Deployment), ...mgmtWrite, 409: e409 } },
    ]),
    ...tagged("channel", [
      {
        method: "get",
        path: "/api/v1/devices/ws",
        access: "device",
        websocket: true,
        summary: "The device management WebSocket",
        responses: { 101: { description: "Upgraded" }, 401: e401, 426: { description: "Not a WebSocket upgrade", json: errors[400].json } },
      },
      {
        method: "get",
        path: "/api/v1/devices/{mac}/shell",
        access: "management",
        websocket: true,
        summary: "A shell session on the device (token also as ?token=); an unknown or offline device is closed with 4001",
        query: z.object({ token: z.string().optional().describe("the management token, for browsers") }),
        responses: { 101: { description: "Upgraded" }, 401: e401, 403: e403, 426: { description: "Not a WebSocket upgrade", json: errors[400].json } },
      },
      {
        method: "get",
        path: "/api/v1/devices/{mac}/shell/attach/{uuid}",
        access: "device",
        websocket: true,
        summary: "The device's end of a shell session",
        responses: { 101: { description: "Upgraded" }, 401: e401, 403: e403, 426: { description: "Not a WebSocket upgrade", json: errors[400].json } },
      },
    ]),
    ...tagged("actions", [
      { method: "get", path: "/api/v2/devices/{mac}/action/list", access: "management", summary: "The device's actions", responses: { 200: reply(list(anyObject)), ...mgmtRead, 504: e400 } },
      {
        method: "get",
        path: "/api/v2/devices/{mac}/action/exec/{action_id}",
        access: "management",
        summary: "Run an action (202 {} when the device is offline: queued; 429 when update_server.max_queued_actions wait for it already)",
        responses: { 200: reply(ActionLogEntry), 202: ok(Empty, "Queued"), ...mgmtRead, 429: e429, 504: e400 },
      },
      {
        method: "post",
        path: "/api/v2/devices/action/exec",
        access: "management",
        summary:
          "Run an action on many devices (labgate): per device the status and body its own exec would answer (429 for a device whose queue is full, or past update_server.max_queued_per_request offline devices)",
        body: { json: execManyBody },
        responses: { 200: reply(z.object({ results: list(z.looseObject({ device: z.string(), status: z.int() })) })), ...mgmtWrite },
      },
      { method: "get", path: "/api/v2/devices/{mac}/action/log", access: "management", summary: "The device's action log", responses: { 200: reply(list(ActionLogEntry)), ...mgmtRead } },
      { method: "delete", path: "/api/v2/devices/{mac}/action/log", access: "management", summary: "Clear finished entries", responses: { 200: ok(), ...mgmtRead } },
      { method: "delete", path: "/api/v2/devices/{mac}/action/pending", access: "management", summary: "Drop queued actions", responses: { 200: ok(), ...mgmtRead } },
      { method: "post", path: "/api/v2/devices/{mac}/action/remove", access: "management", summary: "Remove log entries", body: { json: removeActionsBody }, responses: { 200: ok(), ...mgmtWrite } },
    ]),
    ...tagged("device files", [
      {
        method: "post",
        path: "/api/v2/devices/{id}/fs/file",
        access: "management",
        summary: "Fetch a file from the device (status 0 with a link, or 1)",
        body: { json: fileRequestBody },
        responses: { 200: reply(z.looseObject({ status: z.int() })), ...mgmtWrite, 504: e400 },
      },
      {
        method: "put",
        path: "/local_storage_multipart/parts/{part}",
        access: "public",
        summary: "A device uploads one part of an open transfer (signed URL)",
        body: { media: "application/octet-stream" },
        responses: { 200: { description: "Stored (Etag header)" }, 404: e404 },
      },
      {
        method: "get",
        path: "/local_storage_multipart/multipart/{path}",
        access: "public",
        summary: "A fetched device file through a signed link",
        responses: { 200: { description: "The file", media: "application/octet-stream" }, 206: { description: "Part of the file", media: "application/octet-stream" }, 404: e404 },
      },
    ]),
    ...tagged("events", [
      { method: "get", path: "/api/stream", access: "management", summary: "Live connect, disconnect and update events (SSE)", responses: { 200: { description: "Event stream", media: "text/event-stream" }, 401: e401 } },
    ]),
    ...tagged("logs", [
      {
        method: "post",
        path: "/api/v1/logs",
        access: "device",
        summary: `A device sends a batch of log entries (at most ${config.update_server.device_logs_max_batch}, each at most 4096 bytes; ${config.update_server.device_logs_per_device} entries and ${config.update_server.device_log_bytes_per_device} bytes kept per device; ${config.update_server.device_logs_per_minute} entries a minute)`,
        body: { json: logBatchBody(config.update_server.device_logs_max_batch) },
        responses: { 200: ok(), 400: e400, 401: e401, 413: e413, 429: { ...e429, headers: { "Retry-After": "seconds until the batch fits the device's rate" } } },
      },
      { method: "get", path: "/api/v1/logs/device/{id}", access: "management", summary: "A device's log entries, newest first (paged with limit/offset; without them streamed whole)", query: logFilter, responses: { 200: { ...reply(list(Log)), headers: LOG_TOTAL }, 400: e400, ...mgmtRead } },
      { method: "get", path: "/api/v1/logs/group/{id}", access: "management", summary: "The log entries of a group's devices, newest first (paged with limit/offset; without them streamed whole)", query: logFilter, responses: { 200: { ...reply(list(Log)), headers: LOG_TOTAL }, 400: e400, ...mgmtRead } },
      { method: "delete", path: "/api/v1/logs/device/{id}", access: "management", summary: "Delete a device's log entries", query: logDeleteQuery, responses: { 200: ok(), ...mgmtWrite } },
      { method: "delete", path: "/api/v1/logs/group/{id}", access: "management", summary: "Delete the log entries of a group's devices", query: logDeleteQuery, responses: { 200: ok(), ...mgmtWrite } },
      { method: "get", path: "/api/v1/logs/{id}", access: "management", summary: "One log entry", responses: { 200: reply(Log), ...mgmtRead } },
      { method: "delete", path: "/api/v1/logs/{id}", access: "management", summary: "Delete one log entry", responses: { 200: ok(), ...mgmtRead } },
    ]),
  ];
}
