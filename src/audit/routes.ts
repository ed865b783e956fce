import { Hono } from "hono";
import * as z from "zod";
import type { Auth } from "../auth/middleware.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { errors, route, routes } from "../http/openapi.ts";
import { LabgateError } from "../util/errors.ts";
import { auditCsv, countAudit, listAudit } from "./audit.ts";
import { AuditEntry, AuditQuery } from "./schema.ts";

/** The present names of some targets (`device:4` -> its name); those without one are left out. */
export type TargetNames = (targets: readonly string[]) => Map<string, string> | Promise<Map<string, string>>;

/** GET /api/v1/audit (admin read scope), with its operation (src/http/openapi.ts, `route`); `names` fills the JSON entries' `target_name`. */
export function auditRoutes(ctx: AppContext, auth: Auth, names: TargetNames = () => new Map()) {
  const app = new Hono<AppEnv>();
  const getAudit = route(
    app,
    {
      method: "get",
      path: "/api/v1/audit",
      tag: "audit",
      access: "management",
      summary: "The audit log: who changed what, when, from where (admin read scope); filtered, paged, or all of it as CSV",
      query: AuditQuery,
      responses: {
        200: { description: "Entries, newest first", json: z.array(AuditEntry), media: "text/csv", headers: { "X-Total-Count": "how many entries match (JSON answers)" } },
        400: errors[400],
        401: errors[401],
        403: errors[403],
      },
    },
    auth.management("admin_ro"),
    async (c, { query: { limit, offset, format, ...filter } }) => {
      if (filter.since && filter.until && filter.since >= filter.until) throw new LabgateError("invalid", '"since" must be before "until"');
      if (format === "csv") {
        return new Response(auditCsv(ctx.store.query, filter), {
          headers: { "Content-Type": "text/csv; charset=utf-8", "Content-Disposition": 'attachment; filename="audit.csv"', "Cache-Control": "no-store" },
        });
      }
      c.header("X-Total-Count", String(await countAudit(ctx.store.query, filter)));
      const entries = await listAudit(ctx.store.query, filter, { limit: limit ?? 100, offset: offset ?? 0 });
      const named = await names(entries.map((e) => e.target));
      return c.json(entries.map((e) => ({ ...e, target_name: named.get(e.target) ?? null })));
    },
  );
  return routes(app, getAudit);
}
