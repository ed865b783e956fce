import { Hono, type Context } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import * as z from "zod";
import { errors, jsonBody, ok, objectRefusals, route, type RouteHandler } from "../../http/openapi.ts";
import { LabgateError } from "../../util/errors.ts";
import type { Permission } from "../permissions/schema.ts";
import { pathId } from "../validation.ts";
import { jsonArrayReply } from "../../http/json-array.ts";
import { appendLogs, checkEntrySizes, countLogs, deleteLogs, deviceLogScope, groupLogScope, logPages, LogRate, queryLogs, readableLog, removeLog, type DeviceScope } from "./logs.ts";
import { Log, LogBatch, LogDeleteQuery, LogFilterQuery, MAX_ENTRY_BYTES } from "./schema.ts";
import { dateOf } from "../../util/time.ts";

const TOTAL = { "X-Total-Count": "how many entries match before paging" };
const tag = "logs";

/**
 * Device logs. Devices post with their token; managers read (`read` on
 * the device) and delete (`update` on the device) like other device data: admin scopes pass,
 * everyone else goes through the permission table, a hidden device or log is a 404.
 */
export function logsRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const { store } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();
  const limits = ctx.config.update_server;
  const rate = new LogRate(() => limits.device_logs_per_minute, () => ctx.clock.now());
  const batch = LogBatch(limits.device_logs_max_batch);

  route(
    app,
    {
      method: "post",
      path: "/api/v1/logs",
      tag,
      access: "device",
      summary: `A device sends a batch of log entries (at most ${limits.device_logs_max_batch}, each at most ${MAX_ENTRY_BYTES} bytes; ${limits.device_logs_per_device} entries and ${limits.device_log_bytes_per_device} bytes kept per device; ${limits.device_logs_per_minute} entries a minute)`,
      body: { json: batch, parsedBy: "handler" },
      responses: { 200: ok(), 400: errors[400], 401: errors[401], 413: errors[413], 429: { ...errors[429], headers: { "Retry-After": "seconds until the batch fits the device's rate" } } },
    },
    auth.device(),
    async (c) => {
      const identity = c.get("identity");
      if (identity.kind !== "device") throw new LabgateError("unauthenticated", "a device token is required");
      const tooMany = (over: { retryAfter: number }) => {
        c.header("Retry-After", String(over.retryAfter));
        return new LabgateError("too_many", `this device sends more than ${limits.device_logs_per_minute} log entries a minute (update_server.device_logs_per_minute)`);
      };
      // A device past its rate is refused before its body is read: a flood costs no parsing.
      const spent = rate.spent(identity.deviceId);
      if (spent) throw tooMany(spent);
      const { batch: entries } = await jsonBody(c, batch);
      checkEntrySizes(entries);
      const over = rate.take(identity.deviceId, entries.length);
      if (over) throw tooMany(over);
      const quota = { entries: limits.device_logs_per_device, bytes: limits.device_log_bytes_per_device };
      if (!(await appendLogs(store, identity.deviceId, entries, quota, dateOf(ctx.clock)))) throw new LabgateError("unauthenticated", "invalid token was provided");
      return c.json({});
    },
  );

  const deviceScope = (c: Context<AppEnv>, perm: Permission): Promise<DeviceScope> => deviceLogScope(store.query, c.get("identity"), pathId(c.req.param("id"), "device"), perm);
  const groupScope = (c: Context<AppEnv>, perm: Permission): Promise<DeviceScope> => groupLogScope(store.query, c.get("identity"), pathId(c.req.param("id"), "group"), perm);

  /** A list with X-Total-Count: one page with limit or offset, else every entry, streamed. */
  const listed = (what: string) => ({
    summary: `${what}, newest first (paged with limit/offset; without them streamed whole)`,
    query: LogFilterQuery,
    responses: { 200: { ...ok(z.array(Log), "OK"), headers: TOTAL }, 400: errors[400], ...objectRefusals },
  });

  /** A list with X-Total-Count: one page with limit or offset, else every entry, streamed. */
  const list = (scopeOf: (c: Context<AppEnv>) => Promise<DeviceScope>): RouteHandler<AppEnv, ReturnType<typeof listed>> => async (c, { query: { limit, offset, ...filter } }) => {
    const scope = await scopeOf(c);
    c.header("X-Total-Count", String(await countLogs(store.query, scope, filter)));
    if (limit !== undefined || offset !== undefined) return c.json(await queryLogs(store.query, scope, filter, { limit, offset }));
    return jsonArrayReply(c, logPages(store.query, scope, filter));
  };
  route(app, { method: "get", path: "/api/v1/logs/device/:id{[0-9]+}", tag, access: "management", ...listed("A device's log entries") }, mgmt, list((c) => deviceScope(c, "read")));
  route(app, { method: "get", path: "/api/v1/logs/group/:id{[0-9]+}", tag, access: "management", ...listed("The log entries of a group's devices") }, mgmt, list((c) => groupScope(c, "read")));

  const removed = { query: LogDeleteQuery, responses: { 200: ok(), 400: errors[400], ...objectRefusals } };
  route(app, { method: "delete", path: "/api/v1/logs/device/:id{[0-9]+}", tag, access: "management", summary: "Delete a device's log entries", ...removed }, mgmt, async (c, { query }) => {
    await deleteLogs(store, await deviceScope(c, "update"), query, actorOf(c, ctx.clock), `device:${c.req.param("id")}`);
    return c.json({});
  });
  route(app, { method: "delete", path: "/api/v1/logs/group/:id{[0-9]+}", tag, access: "management", summary: "Delete the log entries of a group's devices", ...removed }, mgmt, async (c, { query }) => {
    await deleteLogs(store, await groupScope(c, "update"), query, actorOf(c, ctx.clock), `group:${c.req.param("id")}`);
    return c.json({});
  });

  route(
    app,
    { method: "get", path: "/api/v1/logs/:id{[0-9]+}", tag, access: "management", summary: "One log entry", responses: { 200: ok(Log, "OK"), ...objectRefusals } },
    mgmt,
    async (c) => c.json(await readableLog(store.query, c.get("identity"), pathId(c.req.param("id"), "log"))),
  );
  route(app, { method: "delete", path: "/api/v1/logs/:id{[0-9]+}", tag, access: "management", summary: "Delete one log entry", responses: { 200: ok(), ...objectRefusals } }, mgmt, async (c) => {
    await removeLog(store, c.get("identity"), pathId(c.req.param("id"), "log"), actorOf(c, ctx.clock));
    return c.json({});
  });

  return app;
}
