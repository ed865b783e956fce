/**
 * The deployments API's shapes, each once: deployments/routes.ts registers them with the routes
 * (the OpenAPI document shows them), the handlers parse and answer with them, the console imports
 * the types. The states and statuses are the model's (model.ts decides with them).
 */
import * as z from "zod";
import { integerParam, Rfc822, strictBody } from "../../util/shapes.ts";
import { parseRfc822 } from "../../util/time.ts";

/** A device's state in a deployment (docs/update-server.md, "Deployments"). */
export const DEVICE_STATES = ["waiting", "reserved", "offered", "downloading", "installing", "installed", "retrying", "failed", "already_installed", "no_package", "not_reached", "aborted"] as const;
export type DeviceState = (typeof DEVICE_STATES)[number];

export const STATUSES = ["scheduled", "running", "paused", "completed", "completed_with_failures", "aborted"] as const;
export type Status = (typeof STATUSES)[number];

export const WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] as const;
export type Weekday = (typeof WEEKDAYS)[number];

/** Whether a time zone name is one this runtime knows. */
export function knownTimezone(name: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

const MAX_PHASES = 20;
const MAX_RETRIES = 10;
const field = (name: string, what: string) => `schema validation failed: field "${name}" ${what}`;

const percent = (name: string) =>
  z
    .number({ error: field(name, "must be a number from 0 to 100 (or null)") })
    .min(0, { error: field(name, "must be a number from 0 to 100 (or null)") })
    .max(100, { error: field(name, "must be a number from 0 to 100 (or null)") });

const PHASES_MESSAGE = field("phases", "must be a list of cumulative percents (e.g. [5, 25, 100]) or {\"devices\": n} / {\"percent\": p} items");
/** A phase as asked for: a cumulative percent of the group's devices, or a number of devices this phase adds. */
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
    const percentOf = (spec: z.infer<typeof phaseItem>) => (typeof spec === "number" ? spec : "percent" in spec ? spec.percent : undefined);
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
/** Offers are made only inside it: on `days` (of the start of the range), from `from` to `to` local time in `timezone`. */
export const MaintenanceWindow = z
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
export const DeploymentCreate = strictBody({
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
  error_percent: percent("error_percent").nullable().default(null).describe("pause when more than this percent of the devices offered so far (in the started phases) failed; null: never"),
  device_timeout_minutes: z
    .int({ error: field("device_timeout_minutes", "must be a whole number of minutes from 1") })
    .min(1, { error: field("device_timeout_minutes", "must be a whole number of minutes from 1") })
    .max(525_600, { error: field("device_timeout_minutes", "must be at most a year") })
    .default(1440),
  retries: z
    .int({ error: field("retries", `must be a whole number from 0 to ${MAX_RETRIES}`) })
    .min(0, { error: field("retries", `must be a whole number from 0 to ${MAX_RETRIES}`) })
    .max(MAX_RETRIES, { error: field("retries", `must be a whole number from 0 to ${MAX_RETRIES}`) })
    .default(2)
    .describe("attempts after a failed one: a device that failed retries + 1 times is failed for good in this deployment"),
  retry_backoff_seconds: z
    .number({ error: field("retry_backoff_seconds", "must be a number of seconds from 0 to 86400") })
    .min(0, { error: field("retry_backoff_seconds", "must be a number of seconds from 0 to 86400") })
    .max(86_400, { error: field("retry_backoff_seconds", "must be a number of seconds from 0 to 86400") })
    .default(300)
    .describe("wait before the first retry; each further retry waits twice as long"),
  start_at: instant.nullable().default(null),
  window: MaintenanceWindow.nullable().default(null),
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
  recover: z
    .strictObject(
      {
        power_cycle_after_minutes: z
          .int({ error: field("recover.power_cycle_after_minutes", "must be a whole number of minutes from 1 to 10080") })
          .min(1, { error: field("recover.power_cycle_after_minutes", "must be a whole number of minutes from 1 to 10080") })
          .max(10080, { error: field("recover.power_cycle_after_minutes", "must be a whole number of minutes from 1 to 10080") }),
      },
      { error: field("recover", "must be an object {power_cycle_after_minutes} or null") },
    )
    .nullable()
    .default(null)
    .describe("a board (docs/lab.md) silent that many minutes after it began installing is power-cycled once per attempt, its console captured; it then counts as it reports or times out"),
});

export const DeploymentListQuery = z.object({
  group: integerParam("group", 1, Number.MAX_SAFE_INTEGER),
  status: z.enum(STATUSES, { error: `query parameter "status" must be one of ${STATUSES.join(", ")}` }).optional(),
  version: z.string().max(256).optional(),
  limit: integerParam("limit", 1, 1000).describe("at most this many (default 50; X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER),
});

export const DeploymentPreflightQuery = z.object({
  group: integerParam("group", 1, Number.MAX_SAFE_INTEGER).describe("the group the deployment would go to (required)"),
  version: z.string().min(1).max(256).optional().describe("its version (required)"),
  packages: z
    .string()
    .regex(/^\d{1,16}(,\d{1,16}){0,999}$/, { error: 'query parameter "packages" must be package ids separated by commas' })
    .optional()
    .describe("packages the deployment would assign first, comma-separated"),
});

/** GET /api/v2/deployments/preflight: what a deployment would run into, before it is made. */
export const DeploymentPreflight = z
  .object({
    warnings: z
      .array(
        z.object({
          code: z.enum(["unsigned_package", "untrusted_key"]).describe("unsigned_package: devices that require signatures would refuse it; untrusted_key: signed by a key they do not list"),
          message: z.string(),
          package: z.int(),
          devices: z.array(z.int()).describe("the devices that would refuse it"),
        }),
      )
      .describe("empty: nothing to warn about"),
  })
  .meta({ id: "DeploymentPreflight" });
export type DeploymentPreflight = z.infer<typeof DeploymentPreflight>;

export const DeploymentDevicesQuery = z.object({
  state: z.enum(DEVICE_STATES, { error: `query parameter "state" must be one of ${DEVICE_STATES.join(", ")}` }).optional(),
  phase: integerParam("phase", 0, MAX_PHASES - 1),
  limit: integerParam("limit", 1, 1000).describe("at most this many (default 100; X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER),
});

/** The body of POST /api/v2/deployments/{id}/retry: which failed devices (none named: all of them). */
export const DeploymentRetry = strictBody({
  devices: z
    .array(z.int().positive(), { error: field("devices", "must be a list of device ids") })
    .max(100_000, { error: field("devices", "may list at most 100000 devices") })
    .optional()
    .describe("device ids failed in this deployment; absent: every failed device"),
});

export const HistoryQuery = z.object({ limit: integerParam("limit", 1, 1000), offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER) });

export type PhaseSpec = z.output<typeof phaseItem>;
export type MaintenanceWindow = z.output<typeof MaintenanceWindow>;
/** What validates an installed update: a stored test config and a suite of it ("" for all). */
export type DeploymentValidation = NonNullable<z.output<typeof DeploymentCreate>["validation"]>;

/** How many devices are in each state. */
export const StateCounts = z.object(Object.fromEntries(DEVICE_STATES.map((s) => [s, z.int()])) as Record<DeviceState, z.ZodInt>).meta({ id: "DeploymentStateCounts" });
export type Counts = z.infer<typeof StateCounts>;

/** A deployment with its counts per state and per phase. */
export const Deployment = z
  .object({
    id: z.int(),
    group: z.int(),
    version: z.string(),
    status: z.enum(STATUSES),
    pause_reason: z.string().nullable(),
    current_phase: z.int().describe("index of the last started phase; -1 before the start time"),
    gate: z.enum(["go", "wait", "stuck"]).nullable().describe("the current phase's success gate (stuck: a person decides with advance)"),
    window_open: z.boolean(),
    devices: z.int(),
    counts: StateCounts,
    phases: z.array(z.object({ index: z.int(), until: z.int().describe("the cumulative device count at the phase's end"), devices: z.int(), started: Rfc822.nullable(), succeeded: z.int(), counts: StateCounts })),
    success_percent: z.number().nullable(),
    success_wait_minutes: z.int().nullable(),
    error_percent: z.number().nullable(),
    device_timeout_minutes: z.int(),
    retries: z.int(),
    retry_backoff_seconds: z.number(),
    start_at: Rfc822.nullable(),
    window: MaintenanceWindow.nullable(),
    created: Rfc822,
    created_by: z.string().nullable(),
    validation: z.object({ config: z.string(), suite: z.string() }).nullable().describe("the test run each installed device must pass (docs/device-tests.md)"),
    recover: z.object({ power_cycle_after_minutes: z.int() }).nullable().describe("boards silent after their install are power-cycled once (docs/lab.md)"),
    started: Rfc822.nullable(),
    finished: Rfc822.nullable(),
  })
  .meta({ id: "Deployment" });
export type Deployment = z.infer<typeof Deployment>;

/** A device of a deployment, in the deployment's recorded order. */
export const DeploymentDevice = z
  .object({
    device: z.int(),
    mac_address: z.string(),
    name: z.string(),
    phase: z.int(),
    position: z.int(),
    state: z.enum(DEVICE_STATES),
    progress: z.int().nullable(),
    from_version: z.string().nullable(),
    to_version: z.string().nullable(),
    reason: z.string().nullable(),
    output: z.string().nullable().describe("the last 4 KiB of the install command's output, for a failure"),
    attempt: z.int().describe("offers made to the device in this deployment (0: none yet)"),
    failures: z.int().describe("failed attempts (retries + 1 of them: failed for good)"),
    retry_at: Rfc822.nullable().describe("when a device retrying is offered again"),
    offered: Rfc822.nullable(),
    updated: Rfc822,
  })
  .meta({ id: "DeploymentDevice" });
export type DeploymentDevice = z.infer<typeof DeploymentDevice>;

/** An entry of a device's update history. */
export const UpdateHistoryEntry = z
  .object({
    id: z.int(),
    deployment: z.int().nullable(),
    from_version: z.string().nullable(),
    to_version: z.string(),
    outcome: z.string().describe("installed, failed, not_reached or aborted"),
    attempt: z.int().nullable().describe("the deployment's attempt it answers (null: outside a deployment)"),
    reason: z.string().nullable(),
    output: z.string().nullable().describe("the last 4 KiB of the install command's output, for a failure"),
    at: Rfc822,
  })
  .meta({ id: "UpdateHistoryEntry" });
export type UpdateHistoryEntry = z.infer<typeof UpdateHistoryEntry>;

/** An outcome the device reported (the `update_outcome` message, docs/device-protocol.md). */
export interface Outcome {
  /** The report's `id`: a report sent again is recognised by it. */
  reportId?: string;
  /** The deployment and attempt of the offer it answers (an agent echoes them; absent: a device that does not). */
  deployment?: number;
  attempt?: number;
  state: "installing" | "installed" | "failed" | "aborted";
  version: string;
  fromVersion: string | null;
  reason: string | null;
  output: string | null;
}

/** A deployment's counts per state over time (GET /api/v2/deployments/{id}/timeline). */
export const DeploymentTimeline = z
  .object({
    deployment: z.int(),
    step_minutes: z.int().describe("the minutes between points: 1, or more for a deployment longer than the points allow"),
    points: z
      .array(z.object({ at: Rfc822, counts: StateCounts }))
      .describe("the counts at the deployment's creation, every step after it and now (or when it finished); at most 360 points"),
  })
  .meta({ id: "DeploymentTimeline" });
export type DeploymentTimeline = z.infer<typeof DeploymentTimeline>;
