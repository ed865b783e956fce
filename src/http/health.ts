import { Hono } from "hono";
import type { AppContext, AppEnv } from "../server/context.ts";

/** `GET /api/health` (no token): is the appliance up and its database writable. */
export function healthRoutes(ctx: AppContext): Hono<AppEnv> {
  return new Hono<AppEnv>().get("/api/health", (c) => {
    const database = ctx.db.status();
    return c.json(
      {
        status: database.state === "ok" ? "ok" : "degraded",
        version: ctx.version,
        uptime: Math.floor((Date.now() - ctx.startedAt.getTime()) / 1000),
        database,
      },
      database.state === "ok" ? 200 : 503,
    );
  });
}
