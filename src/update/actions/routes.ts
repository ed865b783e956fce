import { Hono, type Context } from "hono";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { answerOrInternal } from "../../http/errors.ts";
import { LabgateError } from "../../util/errors.ts";
import { z } from "zod";
import { jsonBody } from "../../http/openapi.ts";
import { publicBase } from "../../storage/routes.ts";
import { deviceByMac, devicesByMac } from "../channel/access.ts";
import type { Permission } from "../permissions/permissions.ts";
import { strictBody, zRequiredString } from "../validation.ts";
import type { ActionService, ExecOutcome } from "./actions.ts";

const MAX_IDS = 10_000;
const MSG_IDS = `schema validation failed: field "actions" must be a list of at most ${MAX_IDS} log entry ids`;
/** The body of action/remove. */
export const removeActionsBody = strictBody({ actions: z.array(z.string({ error: MSG_IDS }), { error: MSG_IDS }).max(MAX_IDS, { error: MSG_IDS }) });

const MAX_DEVICES = 10_000;
const MSG_DEVICES = `schema validation failed: field "devices" must be a list of 1 to ${MAX_DEVICES} MAC addresses`;
/** The body of the fan-out (labgate's own route): one action on many devices. */
export const execManyBody = strictBody({
  action_id: zRequiredString("action_id", 256),
  devices: z.array(z.string({ error: MSG_DEVICES }), { error: MSG_DEVICES }).min(1, { error: MSG_DEVICES }).max(MAX_DEVICES, { error: MSG_DEVICES }),
});

/** One device's part of a fan-out: the status and body its own `action/exec` request would have answered. */
export type FanOutEntry = { device: string; status: number } & ({ status_code: number; output: string } | { error: string } | Record<never, never>);

/**
 * Remote actions. Routes name the device by MAC; the MAC is resolved to the
 * device and the permission is checked on it: unknown MAC or hidden device -> 404.
 */
export function actionsRoutes(ctx: AppContext, auth: Auth, actions: ActionService): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const deviceMac = (c: Context<AppEnv>, perm: Permission): string => deviceByMac(db, c.get("identity"), c.req.param("mac") ?? "", perm).mac_address;

  app.get("/api/v2/devices/:mac/action/list", mgmt, async (c) => c.json(await actions.list(deviceMac(c, "read"))));

  // The reference's GET runs the action: refused cross-site like a POST, and a HEAD runs nothing.
  app.get("/api/v2/devices/:mac/action/exec/:action_id", auth.actsOnGet(), mgmt, async (c) => {
    const mac = deviceMac(c, "update");
    const actionId = c.req.param("action_id");
    if (!actionId || actionId.length > 256) throw new LabgateError("invalid", "action id must be 1 to 256 characters");
    const result = await actions.exec(mac, actionId, actorOf(c, ctx.clock));
    if ("queued" in result) return c.json({}, 202);
    return c.json(result);
  });

  // A fan-out: `action/exec` on many devices in one request, logged and recorded in shared writes.
  app.post("/api/v2/devices/action/exec", mgmt, async (c) => {
    const { action_id: actionId, devices } = await jsonBody(c, execManyBody);
    const identity = c.get("identity");
    const macs = [...new Set(devices)];
    // One query for every device's permission: the cost follows the list, not a lookup per MAC.
    const refused = devicesByMac(db, identity, macs, "update");
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
  });

  app.get("/api/v2/devices/:mac/action/log", mgmt, (c) => c.json(actions.log(deviceMac(c, "read"), publicBase(ctx, c))));

  app.delete("/api/v2/devices/:mac/action/log", mgmt, async (c) => {
    await actions.clearLog(deviceMac(c, "update"), actorOf(c, ctx.clock));
    return c.json({});
  });

  app.delete("/api/v2/devices/:mac/action/pending", mgmt, async (c) => {
    await actions.clearPending(deviceMac(c, "update"), actorOf(c, ctx.clock));
    return c.json({});
  });

  app.post("/api/v2/devices/:mac/action/remove", mgmt, async (c) => {
    const mac = deviceMac(c, "update");
    const { actions: ids } = await jsonBody(c, removeActionsBody);
    await actions.remove(mac, ids, actorOf(c, ctx.clock));
    return c.json({});
  });

  return app;
}
