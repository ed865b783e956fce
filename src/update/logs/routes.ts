import { Hono, type Context } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { jsonBody, queryOf } from "../../http/openapi.ts";
import { LabgateError } from "../../util/errors.ts";
import { getDevice } from "../devices/devices.ts";
import { GROUP_NOT_FOUND, getGroup } from "../groups/groups.ts";
import { allowed, authorize, permissionFilter, type Permission } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { appendLogs, deleteLog, deleteLogs, getLog, logBatchBody, logFilterQuery, queryLogs, type DeviceScope } from "./logs.ts";
import { dateOf } from "../../util/time.ts";

const LOG_NOT_FOUND = "log does not exist";
const DEVICE_NOT_FOUND = "device does not exist";

/**
 * Device logs (update-server.md 15.2). Devices post with their token; managers read (`read` on
 * the device) and delete (`update` on the device) like other device data: admin scopes pass,
 * everyone else goes through the permission table (2.7), a hidden device or log is a 404.
 */
export function logsRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  app.post("/api/v1/logs", auth.device(), async (c) => {
    const identity = c.get("identity");
    if (identity.kind !== "device") throw new LabgateError("unauthenticated", "a device token is required");
    const { device_logs_max_batch, device_logs_per_device } = ctx.config.update_server;
    const { batch: entries } = await jsonBody(c, logBatchBody(device_logs_max_batch));
    if (!(await appendLogs(db, identity.deviceId, entries, device_logs_per_device, dateOf(ctx.clock)))) throw new LabgateError("unauthenticated", "invalid token was provided");
    return c.json({});
  });

  /** One device, after the permission check; a missing one is a 404 for admins too. */
  const deviceScope = (c: Context<AppEnv>, perm: Permission): DeviceScope => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, perm);
    if (!getDevice(db, id)) throw new LabgateError("not_found", DEVICE_NOT_FOUND);
    return { sql: "d.id = ?", params: [id] };
  };

  /** The group's devices on which the caller holds `perm` (the group itself must be visible). */
  const groupScope = (c: Context<AppEnv>, perm: Permission): DeviceScope => {
    const id = pathId(c.req.param("id"), "group");
    const identity = c.get("identity");
    authorize(db, identity, "group", id, "read");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const filter = permissionFilter(identity, "device", "d", perm);
    return {
      sql: `d.id IN (SELECT gd.device_id FROM group_devices gd WHERE gd.group_id = ?)${filter ? ` AND ${filter.sql}` : ""}`,
      params: [id, ...(filter?.params ?? [])],
    };
  };

  app.get("/api/v1/logs/device/:id{[0-9]+}", mgmt, (c) => c.json(queryLogs(db, deviceScope(c, "read"), queryOf(c, logFilterQuery))));
  app.get("/api/v1/logs/group/:id{[0-9]+}", mgmt, (c) => c.json(queryLogs(db, groupScope(c, "read"), queryOf(c, logFilterQuery))));

  app.delete("/api/v1/logs/device/:id{[0-9]+}", mgmt, async (c) => {
    await deleteLogs(db, deviceScope(c, "update"), queryOf(c, logFilterQuery));
    return c.json({});
  });
  app.delete("/api/v1/logs/group/:id{[0-9]+}", mgmt, async (c) => {
    await deleteLogs(db, groupScope(c, "update"), queryOf(c, logFilterQuery));
    return c.json({});
  });

  /** A single entry: hidden (no read on its device) looks missing. */
  const visibleLog = (c: Context<AppEnv>) => {
    const log = getLog(db, pathId(c.req.param("id"), "log"));
    if (!log || !allowed(db, c.get("identity"), "device", log.device_id, "read")) throw new LabgateError("not_found", LOG_NOT_FOUND);
    return log;
  };

  app.get("/api/v1/logs/:id{[0-9]+}", mgmt, (c) => c.json(visibleLog(c)));
  app.delete("/api/v1/logs/:id{[0-9]+}", mgmt, async (c) => {
    const log = visibleLog(c);
    authorize(db, c.get("identity"), "device", log.device_id, "update");
    if (!(await deleteLog(db, log.id))) throw new LabgateError("not_found", LOG_NOT_FOUND);
    return c.json({});
  });

  return app;
}
