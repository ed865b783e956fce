import { Hono, type Context } from "hono";
import { actorOf, type Actor } from "../../audit/audit.ts";
import * as z from "zod";
import type { Auth } from "../../auth/middleware.ts";
import { integerParam, jsonBody, queryOf } from "../../http/openapi.ts";
import type { AppContext, AppEnv, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { parseRfc822, rfc822 } from "../../util/time.ts";
import { getDevice } from "../devices/devices.ts";
import { allowed, authorize, permissionFilter } from "../permissions/permissions.ts";
import { groupDeviceIds } from "../groups/groups.ts";
import type { Database } from "../../db/index.ts";
import { pathId, strictBody } from "../validation.ts";
import { DEVICE_STATES, knownTimezone, STATUSES, sumOf, SUCCEEDED, totalOf, WEEKDAYS, type Counts, type PhaseSpec } from "./model.ts";
import type { DeploymentService, DeploymentValidation } from "./service.ts";
import { getDeployment, listDeployments, listHistory, listMembers, parsePhases, parsePhaseStarted, parseWindow, type DeploymentRow, type HistoryRow, type MemberRow } from "./store.ts";

const NOT_FOUND = "deployment does not exist";
const MAX_PHASES = 20;
const field = (name: string, what: string) => `schema validation failed: field "${name}" ${what}`;

const percent = (name: string) =>
  z
    .number({ error: field(name, "must be a number from 0 to 100 (or null)") })
    .min(0, { error: field(name, "must be a number from 0 to 100 (or null)") })
    .max(100, { error: field(name, "must be a number from 0 to 100 (or null)") });

const PHASES_MESSAGE = field("phases", "must be a list of cumulative percents (e.g. [5, 25, 100]) or {\"devices\": n} / {\"percent\": p} items");
const phaseItem = z.union(
  [
    z.number().gt(0).max(100),
    z.strictObject({ percent: z.number().gt(0).max(100) }),
    z.strictObject({ devices: z.int().min(1).max(1_000_000) }),
  ],
  { error: PHASES_MESSAGE },
);
const phases = z
  .array(phaseItem, { error: PHASES_MESSAGE })
  .min(1, { error: field("phases", "must list at least one phase") })
  .max(MAX_PHASES, { error: field("phases", `may list at most ${MAX_PHASES} phases`) })
  .superRefine((list, ctx) => {
    if (list.length === 0) return;
    const percentOf = (spec: PhaseSpec) => (typeof spec === "number" ? spec : "percent" in spec ? spec.percent : undefined);
    let previous = 0;
    for (const spec of list) {
      const p = percentOf(spec);
      if (p === undefined) continue;
      if (p <= previous) return ctx.addIssue({ code: "custom", message: field("phases", "percents must grow from phase to phase (they are cumulative)") });
      previous = p;
    }
    if (percentOf(list[list.length - 1]) !== 100) ctx.addIssue({ code: "custom", message: field("phases", "must end with 100 (percent): the last phase takes every device left") });
  });

const HHMM = /^([01]\d|2[0-3]):[0-5]\d$/;
const windowSchema = z
  .strictObject(
    {
      days: z
        .array(z.enum(WEEKDAYS, { error: field("window.days", `must list days out of ${WEEKDAYS.join(", ")}`) }), { error: field("window.days", "must be a list of days") })
        .min(1, { error: field("window.days", "must list at least one day (a window that never opens)") })
        .transform((days) => [...new Set(days)]),
      from: z.string({ error: field("window.from", 'must be a time "HH:MM"') }).regex(HHMM, { error: field("window.from", 'must be a time "HH:MM"') }),
      to: z.string({ error: field("window.to", 'must be a time "HH:MM"') }).regex(HHMM, { error: field("window.to", 'must be a time "HH:MM"') }),
      timezone: z
        .string({ error: field("window.timezone", "must be an IANA time zone name") })
        .refine(knownTimezone, { error: field("window.timezone", "is not a time zone this server knows (e.g. UTC, Europe/Warsaw)") })
        .default("UTC"),
    },
    { error: field("window", "must be an object {days, from, to, timezone} or null") },
  )
  .refine((w) => w.from !== w.to, { error: field("window", "opens and closes at the same time: it never opens") })
  .describe("offers only on these days (of the range's start), from..to local time; to < from ends the next day");

/** A time: ISO 8601 or RFC 822. */
const instant = z
  .string({ error: field("start_at", "must be a date (ISO 8601 or RFC 822) or null") })
  .transform((text, ctx) => {
    const ms = /^\d{4}-\d\d-\d\d/.test(text) ? Date.parse(text) : (parseRfc822(text)?.getTime() ?? NaN);
    if (Number.isFinite(ms)) return ms;
    ctx.addIssue({ code: "custom", message: field("start_at", "must be a date (ISO 8601 or RFC 822) or null") });
    return z.NEVER;
  });

/** The body of POST /api/v2/deployments. */
export const deploymentCreateBody = strictBody({
  group: z.int({ error: field("group", "must be a group id") }).positive({ error: field("group", "must be a group id") }),
  version: z.string({ error: field("version", "must be a non-empty string") }).min(1, { error: field("version", "must be a non-empty string") }).max(256, { error: field("version", "is too long") }),
  packages: z
    .array(z.int().positive(), { error: field("packages", "must be a list of package ids") })
    .max(1000, { error: field("packages", "may list at most 1000 packages") })
    .default([])
    .describe("packages to assign to the group first (with the target version, or hops on the way)"),
  phases: phases.default([100]).describe("cumulative percents of the group, or device counts per phase; the last is 100"),
  success_percent: percent("success_percent").nullable().default(100).describe("go on to the next phase when this percent of the phase installed; null: only by hand"),
  success_wait_minutes: z.int({ error: field("success_wait_minutes", "must be a whole number of minutes (or null)") }).min(0).max(525_600).nullable().default(null),
  error_percent: percent("error_percent").nullable().default(null).describe("pause when more than this percent of the started devices failed; null: never"),
  device_timeout_minutes: z
    .int({ error: field("device_timeout_minutes", "must be a whole number of minutes from 1") })
    .min(1, { error: field("device_timeout_minutes", "must be a whole number of minutes from 1") })
    .max(525_600, { error: field("device_timeout_minutes", "must be at most a year") })
    .default(1440),
  start_at: instant.nullable().default(null),
  window: windowSchema.nullable().default(null),
  validation: z
    .strictObject(
      {
        config: z.string({ error: field("validation.config", "must name a stored test config") }).min(1, { error: field("validation.config", "must name a stored test config") }),
        suite: z.string({ error: field("validation.suite", "must be a suite or group name") }).default(""),
      },
      { error: field("validation", "must be an object {config, suite} or null") },
    )
    .nullable()
    .default(null)
    .describe("a test config (and suite) each device runs once it installed; a failing run fails the device (reason validation). Needs svc_tests_rw and the test permission on the group's devices"),
});

export const deploymentListQuery = z.object({
  group: integerParam("group", 1, Number.MAX_SAFE_INTEGER),
  status: z.enum(STATUSES, { error: `query parameter "status" must be one of ${STATUSES.join(", ")}` }).optional(),
  version: z.string().max(256).optional(),
  limit: integerParam("limit", 1, 1000).describe("at most this many (default 50; X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER),
});

export const deploymentDevicesQuery = z.object({
  state: z.enum(DEVICE_STATES, { error: `query parameter "state" must be one of ${DEVICE_STATES.join(", ")}` }).optional(),
  phase: integerParam("phase", 0, MAX_PHASES - 1),
  limit: integerParam("limit", 1, 1000).describe("at most this many (default 100; X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER),
});

export const historyQuery = z.object({ limit: integerParam("limit", 1, 1000), offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER) });

const time = (iso: string | null) => (iso === null ? null : rfc822(new Date(iso)));

/** A deployment as the API shows it, with its counts per state and per phase. */
export function deploymentView(service: DeploymentService, row: DeploymentRow) {
  const counts = service.counts(row);
  const ends = parsePhases(row);
  const started = parsePhaseStarted(row);
  const all = counts.reduce<Counts>((sum, c) => {
    for (const state of DEVICE_STATES) sum[state] += c[state];
    return sum;
  }, Object.fromEntries(DEVICE_STATES.map((s) => [s, 0])) as Counts);
  return {
    id: row.id,
    group: row.group_id,
    version: row.version,
    status: row.status,
    pause_reason: row.pause_reason,
    current_phase: row.current_phase,
    gate: service.gateOf(row),
    window_open: service.windowOpenNow(row),
    devices: totalOf(all),
    counts: all,
    phases: ends.map((end, i) => ({
      index: i,
      until: end,
      devices: totalOf(counts[i]),
      started: started[i] ? rfc822(new Date(started[i])) : null,
      succeeded: sumOf(counts[i], SUCCEEDED),
      counts: counts[i],
    })),
    success_percent: row.success_percent,
    success_wait_minutes: row.success_wait,
    error_percent: row.error_percent,
    device_timeout_minutes: row.device_timeout,
    start_at: time(row.start_at),
    window: parseWindow(row),
    created: rfc822(new Date(row.created)),
    created_by: row.created_by,
    validation: row.validation ? (JSON.parse(row.validation) as DeploymentValidation) : null,
    started: time(row.started),
    finished: time(row.finished),
  };
}

/**
 * A deployment's `validation` runs tests on the group's devices: the caller needs svc_tests_rw
 * and the `test` permission on each of them (403 naming those it lacks), and the config must run
 * on a device here (src/testrun/devices/validation.ts).
 */
function checkValidation(db: Database, identity: Identity, groupId: number, validation: DeploymentValidation, service: DeploymentService): void {
  if (!service.validator) throw new LabgateError("invalid", `field "validation": this server runs no tests`);
  if (identity.kind !== "mgmt" || !(identity.scopes.has("tests_rw") || identity.scopes.has("admin_rw"))) throw new LabgateError("forbidden", `field "validation": needs svc_tests_rw`);
  const refused = groupDeviceIds(db, groupId)
    .filter((id) => !allowed(db, identity, "device", id, "test"))
    .map((id) => getDevice(db, id))
    .map((d) => `'${d?.name || d?.mac_address}'`);
  if (refused.length > 0) throw new LabgateError("forbidden", `field "validation": no test permission on device${refused.length > 1 ? "s" : ""} ${refused.join(", ")}`);
  service.validator.check(validation);
}

const memberView = (row: MemberRow) => ({
  device: row.device_id,
  mac_address: row.mac_address,
  name: row.name,
  phase: row.phase,
  position: row.position,
  state: row.state,
  progress: row.progress,
  from_version: row.from_version,
  to_version: row.to_version,
  reason: row.reason,
  output: row.output,
  offered: time(row.offered_at),
  updated: rfc822(new Date(row.updated)),
});

const historyView = (row: HistoryRow) => ({
  id: row.id,
  deployment: row.deployment_id,
  from_version: row.from_version,
  to_version: row.to_version,
  outcome: row.outcome,
  reason: row.reason,
  at: rfc822(new Date(row.at)),
});

/**
 * Deployments (README "Deployments"): reading one needs `read` on its group, creating or changing
 * one `update` on it (admin scopes pass); update history: `read` on the device.
 */
export function deploymentRoutes(ctx: AppContext, auth: Auth, service: DeploymentService): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const deploymentFor = (c: Context<AppEnv>, perm: "read" | "update") => {
    const id = pathId(c.req.param("id"), "deployment");
    const row = getDeployment(db, id);
    // A deployment of a group the caller may not read is as missing as one that does not exist.
    if (!row) throw new LabgateError("not_found", NOT_FOUND);
    try {
      authorize(db, c.get("identity"), "group", row.group_id, "read");
    } catch (error) {
      if (error instanceof LabgateError && error.code === "not_found") throw new LabgateError("not_found", NOT_FOUND);
      throw error;
    }
    if (perm === "update") authorize(db, c.get("identity"), "group", row.group_id, "update");
    return row;
  };

  app.post("/api/v2/deployments", mgmt, async (c) => {
    const body = await jsonBody(c, deploymentCreateBody);
    const identity = c.get("identity");
    authorize(db, identity, "group", body.group, "update");
    if (body.validation) checkValidation(db, identity, body.group, body.validation, service);
    const row = await service.create({
      groupId: body.group,
      version: body.version,
      packages: body.packages,
      phases: body.phases,
      successPercent: body.success_percent,
      successWait: body.success_wait_minutes,
      errorPercent: body.error_percent,
      deviceTimeout: body.device_timeout_minutes,
      startAt: body.start_at,
      window: body.window,
      createdBy: identity.kind === "mgmt" ? identity.user : null,
      validation: body.validation,
      actor: actorOf(c, ctx.clock),
    });
    return c.json(deploymentView(service, row), 201);
  });

  app.get("/api/v2/deployments", mgmt, (c) => {
    const query = queryOf(c, deploymentListQuery);
    const { rows, total } = listDeployments(
      db,
      { group: query.group, status: query.status, version: query.version, limit: query.limit ?? 50, offset: query.offset ?? 0 },
      permissionFilter(c.get("identity"), "group", "g"),
    );
    c.header("X-Total-Count", String(total));
    return c.json(rows.map((row) => deploymentView(service, row)));
  });

  app.get("/api/v2/deployments/:id{[0-9]+}", mgmt, (c) => c.json(deploymentView(service, deploymentFor(c, "read"))));

  app.get("/api/v2/deployments/:id{[0-9]+}/devices", mgmt, (c) => {
    const row = deploymentFor(c, "read");
    const query = queryOf(c, deploymentDevicesQuery);
    const { rows, total } = listMembers(db, row.id, { state: query.state, phase: query.phase, limit: query.limit ?? 100, offset: query.offset ?? 0 });
    c.header("X-Total-Count", String(total));
    return c.json(rows.map(memberView));
  });

  const command = (action: (id: number, actor: Actor) => Promise<void>) => async (c: Context<AppEnv>) => {
    const row = deploymentFor(c, "update");
    await action(row.id, actorOf(c, ctx.clock));
    return c.json(deploymentView(service, getDeployment(db, row.id)!));
  };
  app.post("/api/v2/deployments/:id{[0-9]+}/pause", mgmt, command((id, actor) => service.pause(id, actor)));
  app.post("/api/v2/deployments/:id{[0-9]+}/resume", mgmt, command((id, actor) => service.resume(id, actor)));
  app.post("/api/v2/deployments/:id{[0-9]+}/abort", mgmt, command((id, actor) => service.abort(id, actor)));
  app.post("/api/v2/deployments/:id{[0-9]+}/advance", mgmt, command((id, actor) => service.advance(id, actor)));

  app.get("/api/v2/devices/:id{[0-9]+}/update-history", mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    if (!getDevice(db, id)) throw new LabgateError("not_found", "device does not exist");
    const query = queryOf(c, historyQuery);
    const { rows, total } = listHistory(db, id, query.limit ?? 100, query.offset ?? 0);
    c.header("X-Total-Count", String(total));
    return c.json(rows.map(historyView));
  });

  return app;
}
