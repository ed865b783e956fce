import { Hono } from "hono";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import * as z from "zod";
import { readBodyBytes } from "../../http/body.ts";
import { flagParam, integerParam, jsonBody, queryOf, readFlag } from "../../http/openapi.ts";
import { clientAddress } from "../../http/transport.ts";
import { LabgateError } from "../../util/errors.ts";
import { authorizeDevice, pendingCutoff, signatureHeader } from "./authorize.ts";
import { approveRegistration, countPending, listPending, referencePending, removePending, removePendingBulk } from "./registrations.ts";
import type { ReplayGuard } from "./replay.ts";
import type { DeviceHooks } from "../devices/devices.ts";
import { strictBody, zFlag, zInteger, zRequiredString } from "../validation.ts";
import { dateOf } from "../../util/time.ts";

/** A registration is metadata and a key: a few KB (issue 9 item 4: 64 KB bodies filled the database). */
export const AUTH_BODY_LIMIT = 16 * 1024;

// Request bodies, also shown by the OpenAPI document.
export const pendingBody = strictBody({ mac_address: zRequiredString("mac_address", 64), public_key: zRequiredString("public_key") });
export const registerBody = pendingBody.extend({
  confirm_key_change: zFlag('schema validation failed: field "confirm_key_change" must be true or false').nullish(),
});

/** Paging of the pending list; without either the answer is the whole list, as before. */
export const pendingListQuery = z.object({
  limit: integerParam("limit", 1, 1000).describe("at most this many registrations, oldest first (with X-Total-Count: how many are pending)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many"),
  details: flagParam("details").describe("true: add labgate's key_fingerprint, key_change, device_id and device_key_fingerprint to each (the reference's clients read exactly its four fields)"),
});

/** POST /api/v1/auth/pending/remove: which pending registrations to drop (all conditions hold). */
export const pendingRemoveBody = strictBody({
  all: z.preprocess(readFlag, z.literal(true, { error: 'schema validation failed: field "all" must be true' })).optional(),
  client_address: z.string({ error: 'schema validation failed: field "client_address" must be a string' }).max(64).optional(),
  older_than: zInteger(0, 10 * 365 * 86400, 'schema validation failed: field "older_than" must be an integer (seconds)').optional(),
});

/** Device authorization and registrations. */
export function authRoutes(ctx: AppContext, auth: Auth, replay: ReplayGuard, hooks: DeviceHooks): Hono<AppEnv> {
  const header = signatureHeader(ctx.config.prefix);
  const app = new Hono<AppEnv>();

  // Public: the signature over the raw body is the authentication.
  app.post("/api/v1/auth/device", async (c) => {
    const raw = await readBodyBytes(c, AUTH_BODY_LIMIT);
    if (raw.length === 0) throw new LabgateError("invalid", "request body is empty; expected JSON");
    const result = await authorizeDevice(ctx, replay, raw, c.req.header(header), dateOf(ctx.clock), clientAddress(c));
    if (result.status === "pending") throw new LabgateError("unauthenticated", "device unauthorized");
    return c.json({ token: result.token, expires: result.expires });
  });

  app.get("/api/v1/auth/pending", auth.management("admin_ro"), (c) => {
    const query = queryOf(c, pendingListQuery);
    const cutoff = pendingCutoff(ctx);
    const paged = query.limit !== undefined || query.offset !== undefined;
    if (paged) c.header("X-Total-Count", String(countPending(ctx.db, cutoff)));
    const list = listPending(ctx.db, cutoff, paged ? query : undefined);
    return c.json(query.details ? list : list.map(referencePending));
  });

  // Bulk removal: after a flood, by client address, by age, or all.
  app.post("/api/v1/auth/pending/remove", auth.management("admin_rw"), async (c) => {
    const body = await jsonBody(c, pendingRemoveBody);
    const before = body.older_than === undefined ? undefined : new Date(ctx.clock.now() - body.older_than * 1000).toISOString();
    return c.json({ removed: await removePendingBulk(ctx.db, { all: body.all, client_address: body.client_address, before }, actorOf(c, ctx.clock)) });
  });

  app.post("/api/v1/auth/register", auth.management("admin_rw"), async (c) => {
    const body = await jsonBody(c, registerBody);
    const confirmed = body.confirm_key_change ?? !ctx.config.compat.key_change_confirmation;
    await approveRegistration(ctx.db, hooks, ctx.config.prefix, body.mac_address, body.public_key, confirmed, dateOf(ctx.clock), actorOf(c, ctx.clock));
    return c.json({});
  });

  app.delete("/api/v1/auth/pending", auth.management("admin_rw"), async (c) => {
    const body = await jsonBody(c, pendingBody);
    await removePending(ctx.db, body.mac_address, body.public_key, actorOf(c, ctx.clock));
    return c.json({});
  });

  return app;
}
