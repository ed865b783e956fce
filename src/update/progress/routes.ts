import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import { httpError } from "../../http/errors.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { getDevice } from "../devices/devices.ts";
import { authorize, permissionFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { getProgress, listProgress, removeIdleProgress, toView } from "./progress.ts";

/** Update progress (section 8): PERM(device, read), lists filtered, a device not updating is 404 (D6). */
export function progressRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();

  // Stale records go after the idle time (17 item 11), checked a few times per idle period.
  const idle = ctx.config.update_server.progress_idle_timeout;
  if (idle > 0) {
    const sweep = setInterval(() => {
      removeIdleProgress(db, idle).catch((error) => ctx.log.warn(`progress sweep failed: ${(error as Error).message}`));
    }, Math.min(idle / 4, 3600) * 1000);
    sweep.unref();
    ctx.onShutdown.push(() => clearInterval(sweep));
  }
  const mgmt = auth.management();

  app.get("/api/v2/devices/progress", mgmt, (c) => c.json(listProgress(db, permissionFilter(c.get("identity"), "device", "d")).map(toView)));

  app.get("/api/v2/devices/:id{[0-9]+}/progress", mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    if (!getDevice(db, id)) throw httpError(404, "device does not exist");
    const row = getProgress(db, id);
    if (!row) throw httpError(404, "device is not updating");
    return c.json(toView(row));
  });

  return app;
}
