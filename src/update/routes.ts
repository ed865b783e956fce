import { Hono } from "hono";
import type { Auth } from "../auth/middleware.ts";
import type { AppContext, AppEnv } from "../server/context.ts";
import { createDeviceGate } from "./devices/gate.ts";
import { authRoutes } from "./registration/routes.ts";
import { devicesRoutes } from "./devices/routes.ts";
import { permissionsRoutes } from "./permissions/routes.ts";
import { localStorageRoutes } from "../storage/routes.ts";
import { storageOf, sweepOrphanObjects } from "./packages/packages.ts";
import { packagesRoutes } from "./packages/routes.ts";
import { groupsV1Routes, groupsV2Routes } from "./groups/routes.ts";
import { progressRoutes } from "./progress/routes.ts";
import { updateCheckRoutes } from "./updatecheck/routes.ts";
import { channelRoutes } from "./channel/routes.ts";
import { actionsRoutes } from "./actions/routes.ts";
import { deviceFilesRoutes } from "./devicefiles/routes.ts";
import { eventsRoutes } from "./events/routes.ts";
import { logsRoutes } from "./logs/routes.ts";

/**
 * The update server (update-server.md): every router of the domain, mounted at the root.
 * Each area adds one line here; each router checks its own authorization.
 */
export function updateServerRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  // Device tokens of deleted devices are refused; last_access is kept up to date.
  ctx.deviceGate = createDeviceGate(ctx);

  const app = new Hono<AppEnv>();
  // Issue 3: device authorization and registrations, devices and tags, permissions.
  app.route("/", authRoutes(ctx, auth));
  app.route("/", devicesRoutes(ctx, auth));
  app.route("/", permissionsRoutes(ctx, auth));
  // Issue 4: packages and their storage.
  void sweepOrphanObjects(ctx).catch((error) => ctx.log.warn(`storage sweep failed: ${(error as Error).message}`));
  app.route("/", packagesRoutes(ctx, auth));
  app.route("/", localStorageRoutes(ctx, storageOf(ctx)));
  app.route("/", groupsV2Routes(ctx, auth));
  app.route("/", groupsV1Routes(ctx, auth));
  app.route("/", updateCheckRoutes(ctx, auth));
  app.route("/", progressRoutes(ctx, auth));
  // Issue 5: the device channel, remote actions, file download from devices, live events.
  app.route("/", channelRoutes(ctx, auth));
  app.route("/", actionsRoutes(ctx, auth));
  app.route("/", deviceFilesRoutes(ctx, auth));
  app.route("/", eventsRoutes(ctx, auth));
  // Issue 13: device logs.
  app.route("/", logsRoutes(ctx, auth));
  return app;
}
