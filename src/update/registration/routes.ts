import { Hono } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import * as z from "zod";
import { parseJsonBody, readBodyBytes } from "../../http/body.ts";
import { errors, firstMessage, ok, route, routes, objectRefusals } from "../../http/openapi.ts";
import { clientAddress } from "../../http/transport.ts";
import { LabgateError } from "../../util/errors.ts";
import { authorizeDevice, pendingCutoff, signatureHeader } from "./authorize.ts";
import { approveRegistration, approveRegistrations, countPending, listPending, referencePending, removePending, removePendingBulk } from "./registrations.ts";
import type { ReplayGuard } from "./replay.ts";
import type { DeviceHooks } from "../devices/devices.ts";
import {
  BULK_APPROVE_MAX,
  deviceAuthBody,
  DeviceToken,
  PendingKey,
  PendingListQuery,
  PendingRegistration,
  PendingRemove,
  PendingRemoved,
  ReferencePending,
  Register,
  RegisterBulk,
  RegisterBulkResult,
} from "./schema.ts";
import { dateOf, isoTime } from "../../util/time.ts";

/** A registration is metadata and a key: a few KB (a public route; larger bodies would fill the database). */
export const AUTH_BODY_LIMIT = 16 * 1024;

const TOTAL = { "X-Total-Count": "with limit or offset: how many registrations are pending" };
const write = { 400: errors[400], ...objectRefusals };
const tag = "registration";

/** Device authorization and registrations. */
export function authRoutes(ctx: AppContext, auth: Auth, replay: ReplayGuard, hooks: DeviceHooks) {
  const header = signatureHeader(ctx.config.prefix);
  const app = new Hono<AppEnv>();

  // Public: the signature over the raw body is the authentication.
  const postAuthDevice = route(
    app,
    {
      method: "post",
      path: "/api/v1/auth/device",
      tag,
      access: "public",
      summary: `A device asks for a token: its signed body, the signature in ${header} (docs/device-protocol.md)`,
      body: { json: deviceAuthBody(ctx.config.prefix), anyType: true },
      responses: { 200: ok(DeviceToken, "A token"), 400: errors[400], 401: { description: "Not (yet) accepted: the request is a pending registration now", json: errors[401].json }, 413: errors[413] },
    },
    async (c) => {
      const raw = await readBodyBytes(c, AUTH_BODY_LIMIT);
      if (raw.length === 0) throw new LabgateError("invalid", "request body is empty; expected JSON");
      const fields = deviceAuthBody(ctx.config.prefix).safeParse(parseJsonBody(raw));
      if (!fields.success) throw new LabgateError("invalid", firstMessage(fields.error));
      const result = await authorizeDevice(ctx, replay, raw, fields.data, c.req.header(header), dateOf(ctx.clock), clientAddress(c));
      if (result.status === "pending") throw new LabgateError("unauthenticated", "device unauthorized");
      const answer: DeviceToken = { token: result.token, expires: result.expires };
      return c.json(answer);
    },
  );

  const getAuthPending = route(
    app,
    {
      method: "get",
      path: "/api/v1/auth/pending",
      tag,
      access: "management",
      summary: "Pending registrations in the order they first asked (paged with limit/offset: X-Total-Count); expired ones are not listed",
      query: PendingListQuery,
      responses: { 200: { ...ok(z.array(z.union([PendingRegistration, ReferencePending])), "OK: the reference's four fields, or with details=true all"), headers: TOTAL }, 400: errors[400], ...objectRefusals },
    },
    auth.management("admin_ro"),
    async (c, { query }) => {
      const cutoff = pendingCutoff(ctx);
      const paged = query.limit !== undefined || query.offset !== undefined;
      if (paged) c.header("X-Total-Count", String(await countPending(ctx.store.query, cutoff)));
      const list = await listPending(ctx.store.query, ctx.config.prefix, cutoff, paged ? query : undefined);
      return c.json(query.details ? list : list.map(referencePending));
    },
  );

  // Bulk removal: after a flood, by client address, by age, or all.
  const postAuthPendingRemove = route(
    app,
    {
      method: "post",
      path: "/api/v1/auth/pending/remove",
      tag,
      access: "management",
      summary: "Drop pending registrations in bulk: all, from one client address and/or older than some seconds",
      body: { json: PendingRemove },
      responses: { 200: ok(PendingRemoved, "OK"), ...write },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const before = body.older_than === undefined ? undefined : isoTime(ctx.clock.now() - body.older_than * 1000);
      const answer: PendingRemoved = { removed: await removePendingBulk(ctx.store, { all: body.all, client_address: body.client_address, before }, actorOf(c, ctx.clock)) };
      return c.json(answer);
    },
  );

  const postAuthRegister = route(
    app,
    { method: "post", path: "/api/v1/auth/register", tag, access: "management", summary: "Approve a pending registration", body: { json: Register }, responses: { 200: ok(), ...write, 409: errors[409] } },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const confirmed = body.confirm_key_change ?? !ctx.config.compat.key_change_confirmation;
      await approveRegistration(ctx.store, hooks, ctx.config.prefix, body.mac_address, body.public_key, confirmed, dateOf(ctx.clock), actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  const postAuthRegisterBulk = route(
    app,
    {
      method: "post",
      path: "/api/v1/auth/register/bulk",
      tag,
      access: "management",
      summary: `Approve up to ${BULK_APPROVE_MAX} pending registrations, each as /api/v1/auth/register would (one refused does not stop the others)`,
      body: { json: RegisterBulk },
      responses: { 200: ok(RegisterBulkResult, "OK: one result per registration"), ...write },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const confirmDefault = !ctx.config.compat.key_change_confirmation;
      const items = body.registrations.map((r) => ({ mac: r.mac_address, publicKey: r.public_key, confirmKeyChange: r.confirm_key_change ?? confirmDefault }));
      const results = await approveRegistrations(ctx.store, hooks, ctx.config.prefix, items, dateOf(ctx.clock), actorOf(c, ctx.clock));
      const answer: RegisterBulkResult = { approved: results.filter((r) => r.error === null).length, results };
      return c.json(answer);
    },
  );

  const deleteAuthPending = route(
    app,
    { method: "delete", path: "/api/v1/auth/pending", tag, access: "management", summary: "Drop a pending registration", body: { json: PendingKey }, responses: { 200: ok(), ...write } },
    auth.management("admin_rw"),
    async (c, { body }) => {
      await removePending(ctx.store, body.mac_address, body.public_key, actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  return routes(app, postAuthDevice, getAuthPending, postAuthPendingRemove, postAuthRegister, postAuthRegisterBulk, deleteAuthPending);
}
