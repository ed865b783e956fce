import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import { LabgateError } from "../../util/errors.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { getDevice } from "../devices/devices.ts";
import { authorize, permissionFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { getProgress, listProgress, toView, type UpdateProgress } from "./progress.ts";

/**
 * Update progress: PERM(device, read), lists filtered, a device not updating is 404
 *; a record idle for `progress_idle_timeout` no longer counts.
 */
export function progressRoutes(ctx: AppContext, auth: Auth, progress: UpdateProgress): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  app.get("/api/v2/devices/progress", mgmt, (c) => c.json(listProgress(db, progress.idleCutoff(), permissionFilter(c.get("identity"), "device", "d")).map(toView)));

  app.get("/api/v2/devices/:id{[0-9]+}/progress", mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    if (!getDevice(db, id)) throw new LabgateError("not_found", "device does not exist");
    const row = getProgress(db, id, progress.idleCutoff());
    if (!row) throw new LabgateError("not_found", "device is not updating");
    return c.json(toView(row));
  });

  return app;
}
