import { Hono } from "hono";
import * as z from "zod";
import type { Auth } from "../auth/middleware.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { errors, integerParam, queryOf, type Operation } from "../http/openapi.ts";
import { LabgateError } from "../util/errors.ts";
import { auditCsv, countAudit, listAudit, type AuditFilter } from "./audit.ts";

/** An ISO 8601 time query parameter, answered as the ISO form the log stores. */
const timeParam = (key: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const time = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : NaN;
      if (Number.isFinite(time)) return new Date(time).toISOString();
      ctx.addIssue({ code: "custom", message: `query parameter "${key}" must be an ISO 8601 time such as 2026-11-26T12:00:00Z` });
      return undefined;
    })
    .meta({ type: "string", format: "date-time" });

const text = (what: string) => z.string().max(512).optional().describe(what);

export const auditQuery = z.object({
  since: timeParam("since").describe("entries at or after this time (ISO 8601)"),
  until: timeParam("until").describe("entries before this time (ISO 8601)"),
  actor: text("the account, token user or device MAC address that acted"),
  action: text("an action (device.approve) or a prefix of dotted names (device: every device.* action)"),
  target: text("what was acted on, as entries name it: device:3, group:1, package:2, user:alice, run:<id>"),
  outcome: z.enum(["ok", "refused"]).optional().describe("refused: authorization failures"),
  limit: integerParam("limit", 1, 1000).describe("at most this many entries, newest first (default 100; X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many"),
  format: z.enum(["json", "csv"]).optional().describe("csv: every matching entry as CSV, streamed (limit and offset do not apply)"),
});

export const AuditEntrySchema = z
  .object({
    id: z.int(),
    time: z.string().describe("ISO 8601, UTC"),
    actor_kind: z.enum(["account", "token", "device", "system"]),
    actor: z.string(),
    token_id: z.string().nullable(),
    client: z.string().describe("the client address; empty for the command line"),
    action: z.string().describe("a stable dotted name: device.approve, group.devices, user.add, auth.refused, ..."),
    target: z.string(),
    outcome: z.enum(["ok", "refused"]),
    detail: z.record(z.string(), z.unknown()).nullable(),
  })
  .meta({ id: "AuditEntry" });

export const auditOperations: Operation[] = [
  {
    method: "get",
    path: "/api/v1/audit",
    tag: "audit",
    access: "management",
    summary: "The audit log: who changed what, when, from where (admin read scope); filtered, paged, or all of it as CSV",
    query: auditQuery,
    responses: {
      200: {
        description: "Entries, newest first",
        json: z.array(AuditEntrySchema),
        media: "text/csv",
        headers: { "X-Total-Count": "how many entries match (JSON answers)" },
      },
      400: errors[400],
      401: errors[401],
      403: errors[403],
    },
  },
];

/** GET /api/v1/audit (admin read scope). */
export function auditRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.get("/api/v1/audit", auth.management("admin_ro"), (c) => {
    const { limit, offset, format, ...filter } = queryOf(c, auditQuery);
    if (filter.since && filter.until && filter.since >= filter.until) throw new LabgateError("invalid", '"since" must be before "until"');
    const selection: AuditFilter = filter;
    if (format === "csv") {
      return new Response(auditCsv(ctx.db, selection), {
        headers: { "Content-Type": "text/csv; charset=utf-8", "Content-Disposition": 'attachment; filename="audit.csv"', "Cache-Control": "no-store" },
      });
    }
    c.header("X-Total-Count", String(countAudit(ctx.db, selection)));
    return c.json(listAudit(ctx.db, selection, { limit: limit ?? 100, offset: offset ?? 0 }));
  });
  return app;
}
