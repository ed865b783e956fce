import { Hono } from "hono";
import type { Auth } from "../auth/middleware.ts";
import { scopeName } from "../auth/scopes.ts";
import type { ManagementIdentity } from "../auth/tokens.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { errors, route, routes } from "./openapi.ts";
import { Caller, DeviceCaller, Health } from "./schema.ts";
import { isoTime } from "../util/time.ts";

/** What GET /api/whoami answers for a management token (also the console's login answer). */
export const managementBody = (prefix: string, identity: ManagementIdentity): Caller => ({
  kind: "mgmt" as const,
  sub: identity.user,
  scopes: [...identity.scopes].map((s) => scopeName(prefix, s)),
  expires: isoTime(identity.expiresAt * 1000),
  /** The token's id, for `labgate token revoke --id` and POST /api/v1/tokens/revoke. */
  ...(identity.jti === undefined ? {} : { id: identity.jti }),
});

/**
 * `GET /api/health` (no token): is the appliance up and its database writable.
 * `GET /api/whoami` (any token): what the server makes of a token, for operators and scripts.
 */
export function systemRoutes(ctx: AppContext, auth: Auth) {
  const app = new Hono<AppEnv>();
  const tag = "system";
  const getHealth = route(
    app,
    {
      method: "get",
      path: "/api/health",
      tag,
      access: "public",
      summary: "Is the appliance up and its database writable",
      responses: { 200: { description: "Up", json: Health }, 503: { description: "The database is not writable (status degraded)", json: Health } },
    },
    async (c) => {
      const database = await ctx.store.status();
      const health: Health = {
        status: database.state === "ok" ? "ok" : "degraded",
        version: ctx.version,
        uptime: Math.floor((ctx.clock.now() - ctx.startedAt.getTime()) / 1000),
        database,
      };
      return c.json(health, database.state === "ok" ? 200 : 503);
    },
  );
  const getWhoami = route(
    app,
    {
      method: "get",
      path: "/api/whoami",
      tag,
      access: "any",
      summary: "What the server makes of a token",
      responses: { 200: { description: "The caller", json: Caller.or(DeviceCaller) }, 401: errors[401] },
    },
    auth.any(),
    (c) => {
      const identity = c.get("identity");
      if (identity.kind === "mgmt") return c.json(managementBody(ctx.config.prefix, identity));
      const device: DeviceCaller = { kind: "device", sub: identity.mac, device_id: identity.deviceId, expires: isoTime(identity.expiresAt * 1000) };
      return c.json(device);
    },
  );
  return routes(app, getHealth, getWhoami);
}
