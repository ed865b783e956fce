/*
 * The test-run server's operations for the OpenAPI document (src/http/openapi.ts): Variant A by
 * default, Variant B with `test_server.api_variant: B`, as the routes are registered. With
 * `test_server.auth: none` they need no token.
 */
import * as z from "zod";
import type { Config } from "../config/config.ts";
import { errors, ok, type Access, type Operation, type Reply } from "../http/openapi.ts";
import { repeatBody, reportQuery, runListQuery, triggerBodyA, triggerBodyB } from "./routes/runs.ts";
import { configListQuery, pushBody } from "./routes/configs.ts";
import { artifactUploadQuery, historyQuery } from "./routes/devices.ts";

const date = z.string().describe("Ddd, DD Mon YYYY HH:MM:SS +0000, or empty when not yet");
const ConfigInfo = z.object({ name: z.string(), config_name: z.string(), created: date }).meta({ id: "TestConfig" });
const Artifact = z.object({ name: z.string(), created: date }).meta({ id: "Artifact" });
const RunA = z
  .looseObject({
    id: z.string(),
    config_name: z.string(),
    test_suite_name: z.string(),
    created_at: date,
    started_at: date,
    finished_at: date,
    status: z.enum(["pending", "running", "finished", "failed", "aborted"]),
    metadata: z.record(z.string(), z.string().nullable()),
    trigger_id: z.string().nullable(),
    machine_target: z.string().nullable(),
    pattern: z.string(),
    warnings: z.array(z.string()),
    devices: z
      .array(
        z.object({
          name: z.string().describe("the device's name: the report's `device name`"),
          mac: z.string(),
          dir: z.string().describe("its artifacts are under <dir>/"),
          status: z.enum(["waiting", "pending", "running", "finished", "failed", "aborted"]),
          passed: z.int(),
          failed: z.int(),
          skipped: z.int(),
          error: z.string().nullable().describe('why its share failed or was aborted ("device not connected", "device disconnected", ...)'),
        }),
      )
      .optional()
      .describe("a run on managed devices (machines: device:/group:/tag:): each device's share, failures first"),
  })
  .meta({ id: "TestRun" });
const RunB = z.looseObject({ id: z.int(), run_id: z.int(), config_name: z.string(), status: z.string(), created: date }).meta({ id: "TestRunB" });
const Trigger = z
  .looseObject({ trigger_id: z.string(), is_aborted: z.boolean(), status: z.string(), error: z.string(), config_name: z.string(), runs: z.array(RunA) })
  .meta({ id: "Trigger" });

const NodeStatus = z
  .object({
    name: z.string(),
    url: z.string().describe('"" for this gateway'),
    local: z.boolean().describe(`true for this gateway ("Local device")`),
    reachable: z.boolean().describe("the node answered its config list with the configured token"),
    version: z.string().describe("labgate's version from the node's /api/health; \"\" when unknown (a protoplaster node)"),
    error: z.string().describe("why it is not reachable"),
    latency_ms: z.number().nullable(),
  })
  .meta({ id: "TestNodeStatus" });
const PushResult = z.object({ node: z.string(), pushed: z.array(z.string()), error: z.string().describe('"" when every file was stored') }).meta({ id: "ConfigPushResult" });
const Counts = { total: z.int(), passed: z.int(), failed: z.int(), skipped: z.int() };
const ReportSummary = z
  .object({
    ...Counts,
    columns: z.array(z.string()),
    devices: z.array(z.object({ device: z.string(), ...Counts })).optional().describe("a run on managed devices: the counts of each device, failures first"),
  })
  .meta({ id: "ReportSummary" });
const History = z
  .object({
    runs: z.array(z.object({ id: z.string(), created_at: date, status: z.string(), test_suite_name: z.string(), machine_target: z.string().nullable() })).describe("newest first"),
    rows: z.array(
      z.object({
        device: z.string(),
        mac_address: z.string(),
        test_name: z.string(),
        results: z.array(z.string().nullable()).describe("the status in each of `runs` (null: not run there)"),
        flaky: z.boolean().describe("both passed and failed among these runs"),
        newly_failing: z.boolean().describe("failed in the newest run after passing in the one before"),
      }),
    ),
  })
  .meta({ id: "DeviceTestHistory" });
/** A config problem: the 422 body names the file and line when they are known. */
const ConfigProblem = z.object({ error: z.string(), file: z.string().optional(), line: z.int().optional() }).meta({ id: "ConfigProblem" });
const e422Config: Reply = { description: "The config does not load (file and line when known)", json: ConfigProblem };
const uploadRefused: Reply = { description: "Refused (an invalid YAML's line when known)", json: z.object({ error: z.string(), line: z.int().optional() }) };
const TOTAL = { "X-Total-Count": "with any query parameter: how many runs match before paging" };

const reply = (json: z.ZodType, description = "OK"): Reply => ({ description, json });
const { 400: e400, 401: e401, 403: e403, 404: e404, 413: e413, 422: e422 } = errors;
const csv: Reply = { description: "The CSV report (columns: test_server.report_columns)", media: "text/csv" };
const file: Reply = { description: "The file", media: "application/octet-stream" };

/** The agents' artifact uploads of runs on managed devices (device token; served with Variant A and B). */
const deviceUpload: Operation = {
  method: "put",
  path: "/api/v1/devices/test-runs/{id}/artifacts/{path}",
  summary: "A device uploads an artifact of its share of a run, from ?offset= (its present size; 409 answers the right one)",
  tag: "test runs",
  access: "device",
  query: artifactUploadQuery,
  body: { media: "application/octet-stream" },
  responses: {
    200: reply(z.object({ offset: z.int().describe("the artifact's size now") })),
    400: errors[400],
    401: errors[401],
    404: { description: "The device runs no share of this run (any more)", json: errors[400].json },
    409: { description: "The upload must continue at `offset`", json: z.object({ error: z.string(), offset: z.int() }) },
    413: errors[413],
  },
};

export function testRunOperations(config: Config): Operation[] {
  const access: Access = config.test_server.auth === "none" ? "public" : "management";
  const denied: Record<number, Reply> = access === "public" ? {} : { 401: e401, 403: e403 };
  const op = (o: Omit<Operation, "tag" | "access">): Operation => ({ ...o, tag: "test runs", access, responses: { ...denied, ...o.responses } });
  const configs: Operation[] = [
    op({
      method: "get",
      path: "/api/v1/configs",
      summary: "Uploaded test configs (?details=true: with size)",
      query: configListQuery,
      responses: { 200: reply(z.array(ConfigInfo.extend({ size: z.int().optional().describe("bytes, with details=true") }))), 400: e400 },
    }),
    op({
      method: "post",
      path: "/api/v1/configs",
      summary: "Upload a test config (multipart field `file`)",
      body: { multipart: z.object({ file: z.string().describe("the YAML file") }) },
      responses: { 200: reply(ConfigInfo), 400: uploadRefused, 413: e413, 422: e422 },
    }),
    op({ method: "get", path: "/api/v1/configs/{name}", summary: "One config", responses: { 200: reply(ConfigInfo), 404: e404 } }),
    op({ method: "get", path: "/api/v1/configs/{name}/file", summary: "The config file", responses: { 200: { description: "YAML", media: "text/yaml" }, 404: e404 } }),
    op({ method: "delete", path: "/api/v1/configs/{name}", summary: "Delete a config", responses: { 200: ok(), 404: e404 } }),
  ];
  const base = "/api/v1/test-runs";
  const remote = "/api/v1/test-nodes/{node}/test-runs/{id}";
  const relayed = { 404: e404, 502: { description: "The node cannot be reached, refused the gateway's token, or failed", json: errors[400].json } };
  const nodeRelay: Operation[] = [
    op({ method: "get", path: remote, summary: "A run on a lab node, read through this gateway", responses: { 200: reply(RunA), ...relayed } }),
    op({ method: "get", path: `${remote}/report`, summary: "Its report (?format=json as the node serves it)", query: reportQuery, responses: { 200: csv, ...relayed } }),
    op({ method: "get", path: `${remote}/artifacts`, summary: "Its artifact files", responses: { 200: reply(z.array(Artifact)), ...relayed } }),
    op({
      method: "get",
      path: `${remote}/artifacts/{path}`,
      summary: "One of its artifacts (?preview=true: inline)",
      query: z.object({ preview: z.enum(["true"]).optional() }),
      responses: { 200: file, ...relayed },
    }),
  ];
  if (config.test_server.api_variant === "B") {
    return [
      ...configs,
      op({ method: "get", path: base, summary: "Runs", responses: { 200: reply(z.array(RunB)) } }),
      op({ method: "post", path: base, summary: "Start a run (Location header)", body: { json: triggerBodyB }, responses: { 200: { description: "Started" }, 400: e400, 422: e422 } }),
      op({ method: "get", path: `${base}/{id}`, summary: "One run", responses: { 200: reply(RunB), 404: e404 } }),
      op({ method: "delete", path: `${base}/{id}`, summary: "Abort a run (waits for its end)", responses: { 200: reply(RunB), 400: e400, 404: e404 } }),
      op({ method: "get", path: `${base}/{id}/report`, summary: "The CSV report", responses: { 200: csv, 404: e404 } }),
      deviceUpload,
    ];
  }
  return [
    ...configs,
    deviceUpload,
    op({ method: "get", path: "/api/v1/configs/{name}/test-suites", summary: "The config's test suites", responses: { 200: reply(z.array(z.string())), 404: e404, 422: e422Config } }),
    op({ method: "get", path: "/api/v1/configs/{name}/override-hints", summary: "Keys overrides may set", responses: { 200: reply(z.array(z.string())), 404: e404, 422: e422Config } }),
    op({
      method: "post",
      path: "/api/v1/configs/{name}/push",
      summary: "Copy a stored config and its includes to lab nodes (each node's result)",
      body: { json: pushBody },
      responses: { 200: reply(z.array(PushResult)), 400: e400, 404: e404 },
    }),
    op({
      method: "get",
      path: "/api/v1/configs/{name}/history",
      summary: "Each test's result per device over the config's newest runs on managed devices (rows paged, X-Total-Count)",
      query: historyQuery,
      responses: { 200: { ...reply(History), headers: { "X-Total-Count": "how many (device, test) rows in all" } }, 400: e400 },
    }),
    op({
      method: "get",
      path: "/api/v1/test-targets",
      summary: "Where the caller may run tests on managed devices: devices (at most 1000, by name), groups and tags with the `test` permission",
      responses: {
        200: reply(
          z.object({
            devices: z.array(z.object({ name: z.string(), mac_address: z.string() })),
            total: z.int().describe("how many devices in all"),
            groups: z.array(z.object({ name: z.string(), devices: z.int() })),
            tags: z.array(z.object({ tag: z.string(), devices: z.int() })),
          }),
        ),
      },
    }),
    op({ method: "get", path: "/api/v1/test-nodes", summary: "Configured lab nodes", responses: { 200: reply(z.array(z.object({ name: z.string(), url: z.string() }))) } }),
    op({ method: "get", path: "/api/v1/test-nodes/status", summary: "This gateway and the lab nodes, each checked now (reachable, version)", responses: { 200: reply(z.array(NodeStatus)) } }),
    ...nodeRelay,
    op({
      method: "get",
      path: base,
      summary: "Runs (creation order; filters and paging with X-Total-Count)",
      query: runListQuery,
      responses: { 200: { ...reply(z.array(RunA)), headers: TOTAL }, 400: e400 },
    }),
    op({
      method: "get",
      path: `${base}/stream`,
      summary: "Live run changes (SSE): events run (a run object), trigger (a trigger object), run-deleted ({id})",
      responses: { 200: { description: "Event stream", media: "text/event-stream" } },
    }),
    op({
      method: "post",
      path: base,
      summary: "Start a run (here, on managed devices: machine_target or machines device:/group:/tag:), or dispatch to lab nodes ({} and X-Trigger-Id)",
      body: { json: triggerBodyA },
      responses: {
        200: reply(RunA),
        400: e400,
        404: e404,
        422: e422Config,
        403: { description: "Without svc_tests_rw, or without the `test` permission on a device the targets name (the devices are named)", json: errors[400].json }, 500: { description: "A node could not be reached", json: errors[400].json } },
    }),
    op({ method: "get", path: `${base}/trigger`, summary: "Triggers", responses: { 200: reply(z.array(Trigger)) } }),
    op({ method: "get", path: `${base}/trigger/{tid}`, summary: "One trigger", responses: { 200: reply(Trigger), 404: e404 } }),
    op({ method: "delete", path: `${base}/trigger/{tid}`, summary: "Abort a trigger", responses: { 200: reply(Trigger), 404: e404 } }),
    op({ method: "get", path: `${base}/trigger/{tid}/results`, summary: "Combined results of an aggregating trigger", responses: { 200: reply(z.array(Artifact)), 404: e404 } }),
    op({ method: "get", path: `${base}/trigger/{tid}/results/{path}`, summary: "One combined result file", responses: { 200: file, 404: e404 } }),
    op({ method: "get", path: `${base}/{id}`, summary: "One run", responses: { 200: reply(RunA), 404: e404 } }),
    op({ method: "delete", path: `${base}/{id}`, summary: "Abort a run (answers at once; poll until aborted)", responses: { 200: reply(RunA), 400: e400, 404: e404 } }),
    op({ method: "post", path: `${base}/{id}/repeat`, summary: "Run cases of a run again", body: { json: repeatBody }, responses: { 200: reply(RunA), 400: e400, 404: e404, 422: e422Config } }),
    op({
      method: "delete",
      path: `${base}/{id}/record`,
      summary: "Delete a finished run: its record, report and artifacts",
      responses: { 200: ok(), 404: e404, 409: errors[409] },
    }),
    op({ method: "get", path: `${base}/{id}/report/summary`, summary: "The report's row counts by status", responses: { 200: reply(ReportSummary), 404: e404 } }),
    op({
      method: "get",
      path: `${base}/{id}/report`,
      summary: "The report: CSV, or ?format=json (one object per row, keys = the columns; &group_by=device: grouped by device with counts, failures first)",
      query: reportQuery,
      responses: { 200: { ...csv, json: z.array(z.record(z.string(), z.string())) }, 400: e400, 404: e404 },
    }),
    op({ method: "get", path: `${base}/{id}/artifacts`, summary: "The run's artifact files", responses: { 200: reply(z.array(Artifact)), 404: e404 } }),
    op({
      method: "get",
      path: `${base}/{id}/artifacts/{path}`,
      summary: "One artifact (?preview=true: inline)",
      query: z.object({ preview: z.enum(["true"]).optional() }),
      responses: { 200: file, 404: e404 },
    }),
  ];
}
