import { Hono } from "hono";
import type { Auth } from "../auth/middleware.ts";
import { scopeName } from "../auth/scopes.ts";
import type { ManagementIdentity } from "../auth/tokens.ts";
import type { AppContext, AppEnv } from "../app/context.ts";

/** What GET /api/whoami answers for a management token (also the console's login answer). */
export const managementBody = (prefix: string, identity: ManagementIdentity) => ({
  kind: "mgmt" as const,
  sub: identity.user,
  scopes: [...identity.scopes].map((s) => scopeName(prefix, s)),
  expires: new Date(identity.expiresAt * 1000).toISOString(),
  /** The token's id, for `labgate token revoke --id` and POST /api/v1/tokens/revoke. */
  ...(identity.jti === undefined ? {} : { id: identity.jti }),
});

/**
 * `GET /api/health` (no token): is the appliance up and its database writable.
 * `GET /api/whoami` (any token): what the server makes of a token, for operators and scripts.
 */
export function systemRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  return new Hono<AppEnv>()
    .get("/api/health", (c) => {
      const database = ctx.db.status();
      return c.json(
        {
          status: database.state === "ok" ? "ok" : "degraded",
          version: ctx.version,
          uptime: Math.floor((ctx.clock.now() - ctx.startedAt.getTime()) / 1000),
          database,
        },
        database.state === "ok" ? 200 : 503,
      );
    })
    .get("/api/whoami", auth.any(), (c) => {
      const identity = c.get("identity");
      if (identity.kind === "mgmt") return c.json(managementBody(ctx.config.prefix, identity));
      return c.json({ kind: "device", sub: identity.mac, device_id: identity.deviceId, expires: new Date(identity.expiresAt * 1000).toISOString() });
    });
}
