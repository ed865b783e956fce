import { Hono } from "hono";
import * as z from "zod";
import { errors, ok, objectRefusals, route, routes } from "../../http/openapi.ts";
import type { Auth } from "../../auth/middleware.ts";
import { LabgateError } from "../../util/errors.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { getDevice } from "../devices/devices.ts";
import { permissionFilterSql } from "../permissions/permissions.ts";
import { authorizeSync } from "../permissions/legacy.ts";
import { pathId } from "../validation.ts";
import { getProgress, listProgress, toView, type UpdateProgress } from "./progress.ts";
import { Progress } from "./schema.ts";


/**
 * Update progress: `read` on the device, lists filtered, a device not updating is 404; a record
 * idle for `progress_idle_timeout` no longer counts.
 */
export function progressRoutes(ctx: AppContext, auth: Auth, progress: UpdateProgress) {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const getDevicesProgress = route(app, { method: "get", path: "/api/v2/devices/progress", tag: "updates", access: "management", summary: "Devices that are updating", responses: { 200: ok(z.array(Progress), "OK"), 401: errors[401] } }, mgmt, (c) =>
    c.json(listProgress(db, progress.idleCutoff(), permissionFilterSql(c.get("identity"), "device", "d")).map(toView)),
  );

  const getDevicesByIdProgress = route(
    app,
    { method: "get", path: "/api/v2/devices/:id{[0-9]+}/progress", tag: "updates", access: "management", summary: "One device's update progress", responses: { 200: ok(Progress, "OK"), ...objectRefusals } },
    mgmt,
    (c) => {
      const id = pathId(c.req.param("id"), "device");
      authorizeSync(db, c.get("identity"), "device", id, "read");
      if (!getDevice(db, id)) throw new LabgateError("not_found", "device does not exist");
      const row = getProgress(db, id, progress.idleCutoff());
      if (!row) throw new LabgateError("not_found", "device is not updating");
      return c.json(toView(row));
    },
  );

  return routes(app, getDevicesProgress, getDevicesByIdProgress);
}
