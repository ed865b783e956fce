import { Hono } from "hono";
import { cors } from "hono/cors";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { testRunAccess } from "./access.ts";
import { configRoutes } from "./configs.ts";
import { nodeRoutes } from "./nodes.ts";
import { runRoutes } from "./runs.ts";

/**
 * The test-run server's routes (test-run-server.md sections 12 to 14): configs and runs.
 * Each part registers itself below with the shared access checks; keep this file small.
 */
export function testRunRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const access = testRunAccess(ctx, auth);
  // No CORS unless origins are listed (1.1 DECISION): a config upload is shell access (17.2).
  const origins = ctx.config.test_server.cors_origins;
  if (origins.length > 0) {
    const handler = cors({
      origin: origins.includes("*") ? "*" : origins,
      allowMethods: ["GET", "HEAD", "POST", "DELETE"],
      allowHeaders: ["Authorization", "Content-Type"],
      exposeHeaders: ["Content-Disposition", "X-Trigger-Id", "Location"],
      maxAge: 600,
    });
    for (const path of ["/api/v1/configs", "/api/v1/configs/*", "/api/v1/test-runs", "/api/v1/test-runs/*", "/api/v1/test-nodes", "/api/v1/test-nodes/*"]) app.use(path, handler);
  }
  app.route("/", configRoutes(ctx, access));
  app.route("/", runRoutes(ctx, access));
  // The node list is a Variant A route (14), like suites and hints.
  if (ctx.config.test_server.api_variant === "A") app.route("/", nodeRoutes(ctx, access));
  return app;
}
