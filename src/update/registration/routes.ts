import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { z } from "zod";
import { readBodyBytes } from "../../http/body.ts";
import { jsonBody } from "../../http/openapi.ts";
import { httpError } from "../../http/errors.ts";
import { authorizeDevice, signatureHeader } from "./authorize.ts";
import { approveRegistration, listPending, removePending } from "./registrations.ts";
import { ReplayGuard } from "./replay.ts";
import { strictBody, zRequiredString } from "../validation.ts";

const AUTH_BODY_LIMIT = 64 * 1024;

// Request bodies (update-server.md 9.3, 9.4), also shown by the OpenAPI document.
export const pendingBody = strictBody({ mac_address: zRequiredString("mac_address", 64), public_key: zRequiredString("public_key") });
export const registerBody = pendingBody.extend({
  confirm_key_change: z.boolean({ error: 'schema validation failed: field "confirm_key_change" must be true or false' }).nullish(),
});

/** Device authorization and registrations (update-server.md 9). */
export function authRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const replay = new ReplayGuard();
  const header = signatureHeader(ctx.config.prefix);
  const app = new Hono<AppEnv>();

  // Public: the signature over the raw body is the authentication.
  app.post("/api/v1/auth/device", async (c) => {
    const raw = await readBodyBytes(c, AUTH_BODY_LIMIT);
    if (raw.length === 0) throw httpError(400, "request body is empty; expected JSON");
    const result = await authorizeDevice(ctx, replay, raw, c.req.header(header));
    if (result.status === "pending") throw httpError(401, "device unauthorized");
    return c.json({ token: result.token, expires: result.expires });
  });

  app.get("/api/v1/auth/pending", auth.management("admin_ro"), (c) => c.json(listPending(ctx.db)));

  app.post("/api/v1/auth/register", auth.management("admin_rw"), async (c) => {
    const body = await jsonBody(c, registerBody);
    await approveRegistration(ctx.db, ctx.config.prefix, body.mac_address, body.public_key, body.confirm_key_change ?? false);
    return c.json({});
  });

  app.delete("/api/v1/auth/pending", auth.management("admin_rw"), async (c) => {
    const body = await jsonBody(c, pendingBody);
    await removePending(ctx.db, body.mac_address, body.public_key);
    return c.json({});
  });

  return app;
}
