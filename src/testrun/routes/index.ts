import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { testRunAccess } from "./access.ts";
import { configRoutes } from "./configs.ts";
import { runRoutes } from "./runs.ts";

/**
 * The test-run server's routes (test-run-server.md sections 12 to 14): configs and runs.
 * Each part registers itself below with the shared access checks; keep this file small.
 */
export function testRunRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const access = testRunAccess(ctx, auth);
  app.route("/", configRoutes(ctx, access));
  app.route("/", runRoutes(ctx, access));
  return app;
}
