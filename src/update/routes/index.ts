import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { createDeviceGate } from "../devices/gate.ts";

/**
 * The update server (update-server.md): every router of the domain, mounted at the root.
 * Each area adds one line here; each router checks its own authorization.
 */
export function updateServerRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  // Device tokens of deleted devices are refused; last_access is kept up to date.
  ctx.deviceGate = createDeviceGate(ctx);

  const app = new Hono<AppEnv>();
  return app;
}
