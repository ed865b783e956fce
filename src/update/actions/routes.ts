import { Hono, type Context } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { answerOrInternal } from "../../http/errors.ts";
import { LabgateError } from "../../util/errors.ts";
import * as z from "zod";
import { Empty, ErrorBody, errors, ok, objectRefusals, route, routes } from "../../http/openapi.ts";
import { publicBase } from "../../storage/routes.ts";
import { deviceByMac, devicesByMac } from "../channel/access.ts";
import type { Permission } from "../permissions/schema.ts";
import type { ActionService, ExecOutcome } from "./actions.ts";
import { Action, ActionLogEntry, ExecMany, ExecResult, FanOutResults, PeerActionList, PeerExecutions, PeerOutcomes, RemoveActions, type FanOutEntry } from "./schema.ts";
import { PEER_USER } from "../../cluster/cluster.ts";

/** What a route that asks the device may meet: offline or unable (409), a refusal (502), silence (504). */
const asking = { 409: errors[409], 502: errors[502], 504: errors[504] };
const tag = "actions";

/**
 * Remote actions. Routes name the device by MAC; the MAC is resolved to the
 * device and the permission is checked on it: unknown MAC or hidden device -> 404.
 */
export function actionsRoutes(ctx: AppContext, auth: Auth, actions: ActionService) {
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const deviceMac = async (c: Context<AppEnv>, perm: Permission): Promise<string> => (await deviceByMac(ctx.store.query, c.get("identity"), c.req.param("mac") ?? "", perm)).mac_address;

  const getDevicesByMacActionList = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:mac/action/list",
      tag,
      access: "management",
      summary: "The actions the device offers (asks it)",
      responses: { 200: ok(z.array(Action), "OK"), ...objectRefusals, ...asking },
    },
    mgmt,
    async (c) => c.json(await actions.list(await deviceMac(c, "read"))),
  );

  // The reference's GET runs the action: refused cross-site like a POST, and a HEAD runs nothing.
  const getDevicesByMacActionExecByActionId = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:mac/action/exec/:action_id",
      tag,
      access: "management",
      summary: "Run an action (202 {} when the device is offline: queued; 429 when update_server.max_queued_actions wait for it already)",
      responses: {
        200: ok(ExecResult, "The device's result"),
        202: ok(Empty, "Queued for the device's next connection"),
        400: errors[400],
        ...objectRefusals,
        405: { description: "A HEAD request: this GET runs the action, a HEAD runs nothing (Allow: GET)", json: ErrorBody, headers: { Allow: "GET" } },
        429: errors[429],
        ...asking,
      },
    },
    auth.actsOnGet(),
    mgmt,
    async (c) => {
      const mac = await deviceMac(c, "update");
      const actionId = c.req.param("action_id");
      if (!actionId || actionId.length > 256) throw new LabgateError("invalid", "action id must be 1 to 256 characters");
      const result = await actions.exec(mac, actionId, actorOf(c, ctx.clock));
      if ("queued" in result) return c.json({}, 202);
      const answer: ExecResult = result;
      return c.json(answer);
    },
  );

  // A fan-out: `action/exec` on many devices in one request, logged and recorded in shared writes.
  const postDevicesActionExec = route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/action/exec",
      tag,
      access: "management",
      summary:
        "Run an action on many devices (labgate): per device the status and body its own exec would answer (429 for a device whose queue is full, or past update_server.max_queued_per_request offline devices)",
      body: { json: ExecMany },
      responses: { 200: ok(FanOutResults, "OK"), 400: errors[400], 401: errors[401] },
    },
    mgmt,
    async (c, { body: { action_id: actionId, devices } }) => {
      const identity = c.get("identity");
      const macs = [...new Set(devices)];
      // One query for every device's permission: the cost follows the list, not a lookup per MAC.
      const refused = await devicesByMac(ctx.store.query, identity, macs, "update");
      const permitted = macs.filter((mac) => refused.get(mac) === undefined);
      const settled = await actions.execMany(permitted, actionId, actorOf(c, ctx.clock));
      const outcomes = new Map(permitted.map((mac, i) => [mac, settled[i]]));
      const entry = (mac: string): FanOutEntry => {
        const outcome = outcomes.get(mac);
        if (!outcome) return failed(mac, refused.get(mac));
        if (outcome.status === "rejected") return failed(mac, outcome.reason);
        const result: ExecOutcome = outcome.value;
        return "queued" in result ? { device: mac, status: 202 } : { device: mac, status: 200, ...result };
      };
      const failed = (mac: string, error: unknown): FanOutEntry => {
        const answer = answerOrInternal(error, ctx.log, `action ${actionId} on ${mac}`);
        return { device: mac, status: answer.status, error: answer.message };
      };
      return c.json({ results: macs.map(entry) });
    },
  );

  const getDevicesByMacActionLog = route(app, { method: "get", path: "/api/v2/devices/:mac/action/log", tag, access: "management", summary: "The device's action log", responses: { 200: ok(z.array(ActionLogEntry), "OK"), ...objectRefusals } }, mgmt, async (c) =>
    c.json(await actions.log(await deviceMac(c, "read"), publicBase(ctx, c))),
  );

  const deleteDevicesByMacActionLog = route(app, { method: "delete", path: "/api/v2/devices/:mac/action/log", tag, access: "management", summary: "Clear finished entries", responses: { 200: ok(), ...objectRefusals } }, mgmt, async (c) => {
    await actions.clearLog(await deviceMac(c, "update"), actorOf(c, ctx.clock));
    return c.json({});
  });

  const deleteDevicesByMacActionPending = route(app, { method: "delete", path: "/api/v2/devices/:mac/action/pending", tag, access: "management", summary: "Drop queued actions", responses: { 200: ok(), ...objectRefusals } }, mgmt, async (c) => {
    await actions.clearPending(await deviceMac(c, "update"), actorOf(c, ctx.clock));
    return c.json({});
  });

  const postDevicesByMacActionRemove = route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/:mac/action/remove",
      tag,
      access: "management",
      summary: "Remove log entries",
      body: { json: RemoveActions },
      responses: { 200: ok(), 400: errors[400], ...objectRefusals },
    },
    mgmt,
    async (c, { body: { actions: ids } }) => {
      const mac = await deviceMac(c, "update");
      await actions.remove(mac, ids, actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  // Node to node: another node's executions for the devices whose sockets are here (src/cluster).
  const postClusterActions = route(
    app,
    {
      method: "post",
      path: "/api/v1/cluster/actions",
      tag,
      access: "management",
      summary: "Between the nodes of a cluster: executions logged on another node, for devices whose sockets are on this one (a node's own token only)",
      body: { json: PeerExecutions },
      responses: { 200: ok(PeerOutcomes, "Each execution's outcome, in order"), 400: errors[400], 401: errors[401], 403: errors[403] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const identity = c.get("identity");
      if (identity.kind !== "mgmt" || identity.user !== PEER_USER) throw new LabgateError("forbidden", "only another node of the cluster calls this");
      return c.json({ outcomes: await actions.driveHere(body.action_id, body.executions) });
    },
  );

  const getClusterDevicesByMacActions = route(
    app,
    {
      method: "get",
      path: "/api/v1/cluster/devices/:mac/actions",
      tag,
      access: "management",
      summary: "Between the nodes of a cluster: the action list of a device whose socket is on this one (a node's own token only)",
      responses: { 200: ok(PeerActionList, "The device's actions"), 401: errors[401], 403: errors[403], ...asking },
    },
    auth.management("admin_rw"),
    async (c) => {
      const identity = c.get("identity");
      if (identity.kind !== "mgmt" || identity.user !== PEER_USER) throw new LabgateError("forbidden", "only another node of the cluster calls this");
      return c.json({ actions: await actions.list(c.req.param("mac") ?? "", true) });
    },
  );

  return routes(app, postClusterActions, getClusterDevicesByMacActions, getDevicesByMacActionList, getDevicesByMacActionExecByActionId, postDevicesActionExec, getDevicesByMacActionLog, deleteDevicesByMacActionLog, deleteDevicesByMacActionPending, postDevicesByMacActionRemove);
}
