import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { readBodyBytes, readJsonObject } from "../../http/body.ts";
import { httpError } from "../../http/errors.ts";
import { authorizeDevice, signatureHeader } from "./authorize.ts";
import { approveRegistration, listPending, removePending } from "./registrations.ts";
import { ReplayGuard } from "./replay.ts";
import { onlyKeys, requireString } from "../validation.ts";

const AUTH_BODY_LIMIT = 64 * 1024;

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
    const body = await readJsonObject(c);
    onlyKeys(body, ["mac_address", "public_key", "confirm_key_change"]);
    const mac = requireString(body, "mac_address", 64);
    const publicKey = requireString(body, "public_key");
    const confirm = body.confirm_key_change ?? false;
    if (typeof confirm !== "boolean") throw httpError(400, 'schema validation failed: field "confirm_key_change" must be true or false');
    await approveRegistration(ctx.db, ctx.config.prefix, mac, publicKey, confirm);
    return c.json({});
  });

  app.delete("/api/v1/auth/pending", auth.management("admin_rw"), async (c) => {
    const body = await readJsonObject(c);
    onlyKeys(body, ["mac_address", "public_key"]);
    const mac = requireString(body, "mac_address", 64);
    const publicKey = requireString(body, "public_key");
    await removePending(ctx.db, mac, publicKey);
    return c.json({});
  });

  return app;
}
