/*
 * The test-run server's operations for the OpenAPI document (src/http/openapi.ts): Variant A by
 * default, Variant B with `test_server.api_variant: B`, as the routes are registered. With
 * `test_server.auth: none` they need no token.
 */
import { z } from "zod";
import type { Config } from "../config/config.ts";
import { errors, ok, type Access, type Operation, type Reply } from "../http/openapi.ts";
import { repeatBody, reportQuery, triggerBodyA, triggerBodyB } from "./routes/runs.ts";

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
  })
  .meta({ id: "TestRun" });
const RunB = z.looseObject({ id: z.int(), run_id: z.int(), config_name: z.string(), status: z.string(), created: date }).meta({ id: "TestRunB" });
const Trigger = z
  .looseObject({ trigger_id: z.string(), is_aborted: z.boolean(), status: z.string(), error: z.string(), config_name: z.string(), runs: z.array(RunA) })
  .meta({ id: "Trigger" });

const reply = (json: z.ZodType, description = "OK"): Reply => ({ description, json });
const { 400: e400, 401: e401, 403: e403, 404: e404, 413: e413, 422: e422 } = errors;
const csv: Reply = { description: "The CSV report (columns: test_server.report_columns)", media: "text/csv" };
const file: Reply = { description: "The file", media: "application/octet-stream" };

export function testRunOperations(config: Config): Operation[] {
  const access: Access = config.test_server.auth === "none" ? "public" : "management";
  const denied: Record<number, Reply> = access === "public" ? {} : { 401: e401, 403: e403 };
  const op = (o: Omit<Operation, "tag" | "access">): Operation => ({ ...o, tag: "test runs", access, responses: { ...o.responses, ...denied } });
  const configs: Operation[] = [
    op({ method: "get", path: "/api/v1/configs", summary: "Uploaded test configs", responses: { 200: reply(z.array(ConfigInfo)) } }),
    op({
      method: "post",
      path: "/api/v1/configs",
      summary: "Upload a test config (multipart field `file`)",
      body: { multipart: z.object({ file: z.string().describe("the YAML file") }) },
      responses: { 200: reply(ConfigInfo), 400: e400, 413: e413, 422: e422 },
    }),
    op({ method: "get", path: "/api/v1/configs/{name}", summary: "One config", responses: { 200: reply(ConfigInfo), 404: e404 } }),
    op({ method: "get", path: "/api/v1/configs/{name}/file", summary: "The config file", responses: { 200: { description: "YAML", media: "text/yaml" }, 404: e404 } }),
    op({ method: "delete", path: "/api/v1/configs/{name}", summary: "Delete a config", responses: { 200: ok(), 404: e404 } }),
  ];
  const base = "/api/v1/test-runs";
  if (config.test_server.api_variant === "B") {
    return [
      ...configs,
      op({ method: "get", path: base, summary: "Runs", responses: { 200: reply(z.array(RunB)) } }),
      op({ method: "post", path: base, summary: "Start a run (Location header)", body: { json: triggerBodyB }, responses: { 200: { description: "Started" }, 400: e400, 422: e422 } }),
      op({ method: "get", path: `${base}/{id}`, summary: "One run", responses: { 200: reply(RunB), 404: e404 } }),
      op({ method: "delete", path: `${base}/{id}`, summary: "Abort a run (waits for its end)", responses: { 200: reply(RunB), 400: e400, 404: e404 } }),
      op({ method: "get", path: `${base}/{id}/report`, summary: "The CSV report", responses: { 200: csv, 404: e404 } }),
    ];
  }
  return [
    ...configs,
    op({ method: "get", path: "/api/v1/configs/{name}/test-suites", summary: "The config's test suites", responses: { 200: reply(z.array(z.string())), 404: e404, 422: e422 } }),
    op({ method: "get", path: "/api/v1/configs/{name}/override-hints", summary: "Keys overrides may set", responses: { 200: reply(z.array(z.string())), 404: e404, 422: e422 } }),
    op({ method: "get", path: "/api/v1/test-nodes", summary: "Configured lab nodes", responses: { 200: reply(z.array(z.object({ name: z.string(), url: z.string() }))) } }),
    op({ method: "get", path: base, summary: "Runs", responses: { 200: reply(z.array(RunA)) } }),
    op({
      method: "post",
      path: base,
      summary: "Start a run, or dispatch to lab nodes ({} and X-Trigger-Id)",
      body: { json: triggerBodyA },
      responses: { 200: reply(RunA), 400: e400, 404: e404, 422: e422, 500: { description: "A node could not be reached", json: errors[400].json } },
    }),
    op({ method: "get", path: `${base}/trigger`, summary: "Triggers", responses: { 200: reply(z.array(Trigger)) } }),
    op({ method: "get", path: `${base}/trigger/{tid}`, summary: "One trigger", responses: { 200: reply(Trigger), 404: e404 } }),
    op({ method: "delete", path: `${base}/trigger/{tid}`, summary: "Abort a trigger", responses: { 200: reply(Trigger), 404: e404 } }),
    op({ method: "get", path: `${base}/trigger/{tid}/results`, summary: "Combined results of an aggregating trigger", responses: { 200: reply(z.array(Artifact)), 404: e404 } }),
    op({ method: "get", path: `${base}/trigger/{tid}/results/{path}`, summary: "One combined result file", responses: { 200: file, 404: e404 } }),
    op({ method: "get", path: `${base}/{id}`, summary: "One run", responses: { 200: reply(RunA), 404: e404 } }),
    op({ method: "delete", path: `${base}/{id}`, summary: "Abort a run (answers at once; poll until aborted)", responses: { 200: reply(RunA), 400: e400, 404: e404 } }),
    op({ method: "post", path: `${base}/{id}/repeat`, summary: "Run cases of a run again", body: { json: repeatBody }, responses: { 200: reply(RunA), 400: e400, 404: e404 } }),
    op({
      method: "get",
      path: `${base}/{id}/report`,
      summary: "The report: CSV, or ?format=json (one object per row, keys = the columns)",
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
