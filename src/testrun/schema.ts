/**
 * The test-run server's API shapes, each once (docs/test-run-server.md): the routes
 * (src/testrun/routes/) register their operations and parse with these, the handlers and views
 * answer with their types, and the console imports the types. Zod, src/http/shapes.ts and
 * runs/status.ts (which imports nothing) only, so that the console's build can follow them.
 */
import * as z from "zod";
import { integerParam, jsonObject, strictBody } from "../util/shapes.ts";
import { RUN_STATUSES, type RunStatus } from "./runs/status.ts";

/** A time of the test-run API: RFC 822 with a numeric zone; "" when not yet. */
const TestTime = z.string().describe("Ddd, DD Mon YYYY HH:MM:SS +0000, or empty when not yet");
const Status = z.enum(RUN_STATUSES);

// ---- configs ------------------------------------------------------------------------------------

/** A stored config in the list and the upload's answer. */
export const TestConfig = z.object({ name: z.string(), created: TestTime, size: z.int().optional().describe("bytes, with ?details=true") }).meta({ id: "TestConfig" });
export type TestConfig = z.infer<typeof TestConfig>;

/** GET /api/v1/configs/{name}: the name twice (`config_name` too, as the reference describes it). */
export const TestConfigInfo = z.object({ name: z.string(), config_name: z.string(), created: TestTime }).meta({ id: "TestConfigInfo" });
export type TestConfigInfo = z.infer<typeof TestConfigInfo>;

/** A config problem: the 422 body names the file and line when they are known. */
export const ConfigProblem = z.object({ error: z.string(), file: z.string().optional(), line: z.int().optional() }).meta({ id: "ConfigProblem" });
export type ConfigProblem = z.infer<typeof ConfigProblem>;

/** A refused upload: the line of an invalid YAML when known. */
export const UploadRefusal = z.object({ error: z.string(), line: z.int().optional() }).meta({ id: "ConfigUploadRefusal" });

/** GET /configs?details=true adds each config's `size` (for the console); without it the list is as the reference's. */
export const configListQuery = z.object({
  details: z.enum(["true"], { error: 'query parameter "details" must be true' }).optional().describe("labgate: also each config's size in bytes"),
});

/** POST /configs/{name}/push: the nodes to copy the config (and its includes) to. */
export const pushBody = z.strictObject(
  { nodes: z.array(z.string({ error: "nodes must be a list of node names" }), { error: "nodes must be a list of node names" }).min(1, { error: "nodes must name at least one node" }).max(256) },
  jsonObject,
);

/** One node's result of a push. */
export const PushResult = z
  .object({ node: z.string(), pushed: z.array(z.string()).describe("config names the node stored: the config, then its includes"), error: z.string().describe('"" when every file was stored') })
  .meta({ id: "ConfigPushResult" });
export type PushResult = z.infer<typeof PushResult>;

// ---- runs ---------------------------------------------------------------------------------------

/** A device's share of a run on managed devices (src/testrun/devices/), as the run object shows it. */
export const DeviceProgress = z.object({
  name: z.string().describe("the device's name: the report's `device name`"),
  mac: z.string(),
  dir: z.string().describe("its artifacts are under <dir>/"),
  status: z.enum(["waiting", ...RUN_STATUSES]).describe("waiting: for the device to connect"),
  passed: z.int(),
  failed: z.int(),
  skipped: z.int(),
  error: z.string().nullable().describe('why its share failed or was aborted ("device not connected", "device disconnected", ...)'),
});
export type DeviceProgress = z.infer<typeof DeviceProgress>;

/** A run's cases by status (its report's rows), kept when it ended. */
export const RunCounts = z.object({ passed: z.int(), failed: z.int(), skipped: z.int() }).meta({ id: "RunCounts" });
export type RunCounts = z.infer<typeof RunCounts>;

/** What the run objects of both variants say alike. */
const runFields = {
  config_name: z.string(),
  test_suite_name: z.string(),
  status: Status,
  metadata: z.record(z.string(), z.string().nullable()).describe("the metadata commands' outputs; {} until the run is final"),
  error: z.string().optional().describe("why the run failed or was aborted"),
};

/** The run object (Variant A). */
export const TestRun = z
  .object({
    ...runFields,
    id: z.string(),
    created_at: TestTime,
    started_at: TestTime,
    finished_at: TestTime,
    trigger_id: z.string(),
    machine_target: z.string().nullable(),
    overrides: z.union([z.array(z.string()), z.record(z.string(), z.unknown())]).describe("as given to the trigger; [] when none"),
    pattern: z.string(),
    repeat_of: z.string().optional().describe("the run this one repeats"),
    warnings: z.array(z.string()),
    abort_requested: z.literal(true).optional().describe("an abort is under way"),
    devices: z.array(DeviceProgress).optional().describe("a run on managed devices (machines: device:/group:/tag:): each device's share, failures first"),
    counts: RunCounts.optional().describe("once it ended: its cases by status, here or summed over its devices; absent for a run that ended before counts were kept, or without a report"),
  })
  .meta({ id: "TestRun" });
export type TestRun = z.infer<typeof TestRun>;

/** The run object of Variant B: integer ids, `created`, `completed` once final. */
export const TestRunB = z
  .object({
    ...runFields,
    run_id: z.int(),
    id: z.int(),
    created: TestTime,
    completed: TestTime.optional().describe("once final"),
  })
  .meta({ id: "TestRunB" });
export type TestRunB = z.infer<typeof TestRunB>;

export const TRIGGER_STATUSES = ["running", "finished", "failed", "aborted"] as const;
export type TriggerStatus = (typeof TRIGGER_STATUSES)[number];

/** A trigger: the runs one request started, here or dispatched to lab nodes. */
export const Trigger = z
  .object({
    trigger_id: z.string(),
    is_aborted: z.boolean(),
    status: z.enum(TRIGGER_STATUSES),
    error: z.string().describe('why the dispatch failed, naming each node; "" otherwise'),
    config_name: z.string(),
    test_suite_name: z.string(),
    runs: z.array(TestRun).describe("its runs on this gateway"),
    remote_runs: z.array(z.object({ machine: z.string(), group: z.string(), run_id: z.string() })).describe("its runs on lab nodes"),
  })
  .meta({ id: "Trigger" });
export type Trigger = z.infer<typeof Trigger>;

const optionalString = (key: string) => z.string({ error: `${key} must be a string` }).nullish();
const configName = z.string({ error: "config_name is required (a string)" }).min(1, { error: "config_name is required (a string)" });

/** POST /api/v1/test-runs (Variant A); other fields are ignored, as by the reference. */
export const triggerBodyA = z.looseObject(
  {
    config_name: configName,
    overrides: z.union([z.string(), z.record(z.string(), z.unknown())], { error: "invalid overrides: expected a string or an object" }).nullish(),
    trigger_id: optionalString("trigger_id"),
    test_suite_name: optionalString("test_suite_name"),
    machine_target: optionalString("machine_target").describe(
      "a lab node role; or managed devices: device:<mac or name>, group:<v2 group name>, tag:<tag> (runs the entries without machines, and those naming it, on each device; needs the test permission on each)",
    ),
    pattern: optionalString("pattern").describe("a pytest -k style pattern (docs/test-run-server.md)"),
    nodes: z
      .array(z.string({ error: "nodes must be a list of node names" }), { error: "nodes must be a list of node names" })
      .max(256, { error: "nodes: at most 256" })
      .nullish()
      .describe(`labgate: run the whole selection on each of these nodes at once ("Local device" is this gateway); answered like a dispatch ({} and X-Trigger-Id)`),
  },
  jsonObject,
);
export type TriggerBody = z.output<typeof triggerBodyA>;

/** POST /api/v1/test-runs (Variant B). */
export const triggerBodyB = z.looseObject(
  {
    config_name: configName,
    overrides: z.record(z.string(), z.unknown(), { error: "invalid overrides: expected an object" }).nullish(),
    trigger_id: optionalString("trigger_id"),
    test_suite_name: optionalString("test_suite_name"),
  },
  jsonObject,
);

/** POST /test-runs/{id}/repeat: the pattern of the cases to run again, or null for all. */
export const repeatBody = z.string({ error: "expected a JSON string (the test pattern) or null" }).nullable();

/** GET /test-runs with filters and paging (labgate, for the console); without any the list is as the reference's. */
export const runListQuery = z.object({
  config_name: z.string().max(255, { error: 'query parameter "config_name" is too long' }).optional().describe("only runs of this config"),
  status: z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const list = text.split(",").map((s) => s.trim());
      const bad = list.find((s) => !(RUN_STATUSES as readonly string[]).includes(s));
      if (bad === undefined) return list as RunStatus[];
      ctx.addIssue({ code: "custom", message: `query parameter "status": unknown status ${JSON.stringify(bad)} (${RUN_STATUSES.join(", ")})` });
      return undefined;
    })
    .describe(`only runs in these states, comma-separated (${RUN_STATUSES.join(", ")})`),
  trigger_id: z.string().max(128, { error: 'query parameter "trigger_id" is too long' }).optional().describe("only the runs of this trigger"),
  order: z.enum(["asc", "desc"], { error: 'query parameter "order" must be asc or desc' }).optional().describe("asc: oldest first (the default), desc: newest first"),
  limit: integerParam("limit", 1, 1000).describe("at most this many runs (with X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many of the matches"),
});

// ---- reports and artifacts ----------------------------------------------------------------------

/** GET /test-runs/{id}/report: CSV (the default) or the JSON form. */
export const reportQuery = z.object({
  format: z.enum(["csv", "json"], { error: (iss) => `unknown report format: ${String(iss.input)}` }).optional(),
  group_by: z
    .enum(["device"], { error: 'query parameter "group_by" must be device' })
    .optional()
    .describe("with format=json: [{device, total, passed, failed, skipped, rows}], devices with failures first (a run on managed devices)"),
});

/** A report row in the JSON form: the columns as keys. */
export const ReportRow = z.record(z.string(), z.string());
export type ReportRow = z.infer<typeof ReportRow>;

const counts = { total: z.int(), passed: z.int(), failed: z.int(), skipped: z.int() };
/** Rows counted by `status`. */
export const StatusCounts = z.object(counts);
export type StatusCounts = z.infer<typeof StatusCounts>;
export const DeviceCounts = z.object({ device: z.string(), ...counts });
export type DeviceCounts = z.infer<typeof DeviceCounts>;

/** The JSON report grouped by device (`?format=json&group_by=device`). */
export const DeviceReport = z.array(DeviceCounts.extend({ rows: z.array(ReportRow) }));

/** What a report holds in numbers: its rows by `status` (a report without that column counts only rows). */
export const ReportSummary = z
  .object({
    ...counts,
    columns: z.array(z.string()).describe("the report's column names, in order"),
    devices: z.array(DeviceCounts).optional().describe("a run on managed devices: the counts of each device, failures first"),
  })
  .meta({ id: "ReportSummary" });
export type ReportSummary = z.infer<typeof ReportSummary>;

/** An artifact file of a run (or a combined result of a trigger): its path under the run's directory. */
export const Artifact = z.object({ name: z.string().describe("/-separated path"), created: TestTime }).meta({ id: "Artifact" });
export type Artifact = z.infer<typeof Artifact>;

/** GET .../artifacts/{path}: shown inline when the type is safe to show. */
export const previewQuery = z.object({ preview: z.enum(["true"]).optional().describe("inline for text/plain and png/jpeg/gif/webp, else still an attachment") });

// ---- lab nodes ----------------------------------------------------------------------------------

/** A configured lab node. */
export const TestNode = z.object({ name: z.string(), url: z.string() }).meta({ id: "TestNode" });
export type TestNode = z.infer<typeof TestNode>;

/** This gateway or a lab node, checked now. */
export const NodeStatus = z
  .object({
    name: z.string(),
    url: z.string().describe('"" for this gateway'),
    local: z.boolean().describe('true for this gateway ("Local device")'),
    reachable: z.boolean().describe("the node answered its config list with the configured token"),
    version: z.string().describe("labgate's version from the node's /api/health; \"\" when unknown (a protoplaster node) or down"),
    error: z.string().describe("why it is not reachable: the HTTP status and error, or the connection error"),
    latency_ms: z.number().nullable().describe("round trip of the config list request; null when it failed"),
  })
  .meta({ id: "TestNodeStatus" });
export type NodeStatus = z.infer<typeof NodeStatus>;

// ---- runs on managed devices (docs/device-tests.md) ----------------------------------------------

/** PUT .../artifacts/{path}: where the body goes in the file (its present size; 409 answers the right one). */
export const artifactUploadQuery = z.object({
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("the artifact's present size on the gateway (0 for a new one)"),
});

/** The artifact's size after an upload, or (409) where the upload must continue. */
export const UploadOffset = z.object({ offset: z.int().describe("the artifact's size now") });
export type UploadOffset = z.infer<typeof UploadOffset>;
export const UploadConflict = z.object({ error: z.string(), offset: z.int() });

/** POST .../power: the `power` module of a device's share asks its gateway to switch the board. */
export const DevicePowerRequest = z.object({ action: z.enum(["on", "off", "cycle"], { error: 'action must be one of "on", "off", "cycle"' }) }).meta({ id: "DevicePowerRequest" });
export const DevicePowerDone = z.object({ action: z.enum(["on", "off", "cycle"]) }).meta({ id: "DevicePowerDone" });
export type DevicePowerDone = z.infer<typeof DevicePowerDone>;

/** GET /api/v1/configs/{name}/history: how many runs back, and one page of (device, test) rows. */
export const historyQuery = z.object({
  runs: integerParam("runs", 1, 100).describe("the newest runs on devices to show (default 10)"),
  limit: integerParam("limit", 1, 1000).describe("rows (device, test) in this page (default 100; X-Total-Count: how many in all)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many rows"),
});

/** Each test's result per device over a config's newest runs on managed devices. */
export const DeviceTestHistory = z
  .object({
    runs: z.array(TestRun.pick({ id: true, created_at: true, status: true, test_suite_name: true, machine_target: true })).describe("newest first"),
    rows: z.array(
      z.object({
        device: z.string(),
        mac_address: z.string(),
        test_name: z.string(),
        name: z.string().describe("the entry's `name:` in the config (\"\" without one)"),
        results: z.array(z.string().nullable()).describe("the status in each of `runs` (null: not run there)"),
        flaky: z.boolean().describe("both passed and failed among these runs"),
        newly_failing: z.boolean().describe("failed in the newest run after passing in the one before"),
      }),
    ),
  })
  .meta({ id: "DeviceTestHistory" });
export type DeviceTestHistory = z.infer<typeof DeviceTestHistory>;

/** GET /api/v1/test-targets: where the caller may run tests on managed devices. */
export const TestTargets = z
  .object({
    devices: z.array(z.object({ name: z.string(), mac_address: z.string() })).describe("at most 1000, by name"),
    total: z.int().describe("how many devices in all"),
    groups: z.array(z.object({ name: z.string(), devices: z.int() })),
    tags: z.array(z.object({ tag: z.string(), devices: z.int() })),
  })
  .meta({ id: "TestTargets" });
export type TestTargets = z.infer<typeof TestTargets>;

/** POST /api/v1/cluster/test-shares: a device's share of a run on another node, for the node holding the device's socket to start. */
export const PeerShareStart = strictBody({
  run_id: z.string().min(1).max(128),
  mac: z.string().min(1).max(64),
  /** The run's node, where the device's messages and uploads go. */
  node: z.object({ name: z.string().max(256), url: z.string().max(2048) }),
  start: z.record(z.string(), z.unknown()),
});
export type PeerShareStart = z.infer<typeof PeerShareStart>;

/** The share started on the device, or why not (as the run's node writes it for the device). */
export const PeerShareStarted = z.object({ started: z.boolean(), error: z.string().nullable() });
export type PeerShareStarted = z.infer<typeof PeerShareStarted>;

/** POST /api/v1/cluster/test-runs/{id}/devices/{mac}/power: a share's `power` module, sent on by a node the device asked; `client`: the device's address there, for the audit. */
export const PeerPowerRequest = strictBody({ action: DevicePowerRequest.shape.action, client: z.string().max(256) });
export type PeerPowerRequest = z.infer<typeof PeerPowerRequest>;

/** POST /api/v1/cluster/test-messages: what a device sent for a share run on the node asked (in order), or that its socket closed. */
export const PeerShareMessages = strictBody({
  run_id: z.string().min(1).max(128),
  mac: z.string().min(1).max(64),
  messages: z.array(z.record(z.string(), z.unknown())).max(10_000),
  disconnected: z.boolean(),
});
export type PeerShareMessages = z.infer<typeof PeerShareMessages>;
