/**
 * The audit API's shapes, each once: GET /api/v1/audit parses its query with `AuditQuery` and
 * answers `AuditEntry` rows, the OpenAPI document shows these schemas (audit/routes.ts registers
 * them with the route) and the console imports the types.
 */
import * as z from "zod";
import { integerParam } from "../util/shapes.ts";
import { isoTime } from "../util/time.ts";

/** An ISO 8601 time query parameter, answered as the ISO form the log stores. */
const timeParam = (key: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const time = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : NaN;
      if (Number.isFinite(time)) return isoTime(time);
      ctx.addIssue({ code: "custom", message: `query parameter "${key}" must be an ISO 8601 time such as 2026-11-26T12:00:00Z` });
      return undefined;
    })
    .meta({ type: "string", format: "date-time" });

const text = (what: string) => z.string().max(512).optional().describe(what);

export const ActorKind = z.enum(["account", "token", "device", "system", "anonymous"]);
export type ActorKind = z.infer<typeof ActorKind>;
export const Outcome = z.enum(["ok", "refused"]);
export type Outcome = z.infer<typeof Outcome>;

/** GET /api/v1/audit's query: filters, paging, or every match as CSV. */
export const AuditQuery = z.object({
  since: timeParam("since").describe("entries at or after this time (ISO 8601)"),
  until: timeParam("until").describe("entries before this time (ISO 8601)"),
  actor: text("who acted: an account or token user, a device's MAC address, cli:<login> for a command on the gateway"),
  action: text("an action (device.approve) or a prefix of dotted names (device: every device.* action)"),
  target: text("what was acted on, as entries name it: device:3, group:1, package:2, user:alice, token:<id>, run:<id>"),
  outcome: Outcome.optional().describe("refused: authorization failures"),
  limit: integerParam("limit", 1, 1000).describe("at most this many entries, newest first (default 100; X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many"),
  format: z.enum(["json", "csv"]).optional().describe("csv: every matching entry as CSV, streamed (limit and offset do not apply)"),
});

/** One entry of the audit log. */
export const AuditEntry = z
  .object({
    id: z.int(),
    time: z.string().describe("ISO 8601, UTC"),
    actor_kind: ActorKind.describe("account: a console session; token: a management token; device; system: the server or a command on the gateway (cli:<login>); anonymous: a request without a valid token (a refusal, a failed login)"),
    actor: z.string(),
    token_id: z.string().nullable().describe("the management token's id (jti) when a token acted"),
    client: z.string().describe("the client address; empty for the command line"),
    action: z
      .string()
      .describe(
        "a stable dotted name: device.approve|key_change|delete|rename|tag, registration.remove, package.upload|delete, " +
          "group.create|delete|devices|packages|policy|priority, permission.create|delete, action.exec|clear_log|clear_pending|remove, " +
          "shell.open|close, file.fetch, log.delete, deployment.create|pause|resume|advance|abort|retry (and, by system:deployment, start|advance|pause|timeout|complete|policy), config.upload|delete|push, " +
          "testrun.trigger|abort|delete, power.on|off|cycle, reservation.create|refresh|release|break, board.set|delete, user.add|passwd|scopes|disable|enable|delete, login.success|failure, logout, token.issue|revoke, " +
          "backup, restore, cluster.join; auth.refused for requests refused with 403 (one entry per client, actor, route and window, detail.count of them)",
      ),
    target: z.string(),
    target_name: z.string().nullable().optional().describe("the target's present name (a device's, a group's, a package's version and type); null when it has none or is gone"),
    outcome: Outcome,
    detail: z.record(z.string(), z.unknown()).nullable().describe("a small JSON object; never a password, token or key"),
  })
  .meta({ id: "AuditEntry" });
export type AuditEntry = z.infer<typeof AuditEntry>;
