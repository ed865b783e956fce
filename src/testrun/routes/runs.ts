/**
 * Run routes: Variant A by default, Variant B with
 * `test_server.api_variant: B`. Handlers parse, authorize and call the run service.
 */
import { join } from "node:path";
import { recordRequest } from "../../audit/audit.ts";
import { Hono, type Context } from "hono";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { statFile } from "../../util/files.ts";
import { contentDisposition, fileEtag, serveFile, serveMade, untrustedFileHeaders } from "../../storage/send.ts";
import { z } from "zod";
import { integerParam, jsonBody, jsonObject, queryOf } from "../../http/openapi.ts";
import { Broadcaster, prepareEvent, SharedSubscription, type EventStreams, type PreparedEvent } from "../../http/sse.ts";
import { openReportJson, openReportJsonByDevice, reportSummary } from "../engine/report.ts";
import { PlanError } from "../plan.ts";
import { listArtifacts, openArtifact } from "../runs/artifacts.ts";
import { artifactsDir, reportPath } from "../runs/paths.ts";
import { LOCAL_DEVICE } from "../runs/nodes.ts";
import type { TestRunService } from "../runs/service.ts";
import type { TriggerRequest } from "../runs/trigger.ts";
import { RUN_STATUSES } from "../runs/status.ts";
import { FINAL_STATUSES, type RunChange, type RunRecord, type RunStatus, type TriggerRecord } from "../runs/store.ts";
import { runObjectA, runObjectB, triggerObject } from "../runs/views.ts";
import type { TestRunAccess } from "./access.ts";

/**
 * How long a Variant B DELETE waits for a signalled running run to stop: B answers the run "now
 * aborted", and a process that ignores SIGTERM gets SIGKILL after 5 s. Variant A
 * answers at once, the run still `running` with `abort_requested: true`.
 */
const ABORT_WAIT_B_MS = 7_000;

const optionalString = (key: string) => z.string({ error: `${key} must be a string` }).nullish();
const configName = z.string({ error: "config_name is required (a string)" }).min(1, { error: "config_name is required (a string)" });
const anyObject = z.record(z.string(), z.unknown());

// The POST /test-runs bodies; other fields are ignored, as by the reference.
export const triggerBodyA = z.looseObject(
  {
    config_name: configName,
    overrides: z.union([z.string(), anyObject], { error: "invalid overrides: expected a string or an object" }).nullish(),
    trigger_id: optionalString("trigger_id"),
    test_suite_name: optionalString("test_suite_name"),
    machine_target: optionalString("machine_target").describe(
      "a lab node role; or managed devices: device:<mac or name>, group:<v2 group name>, tag:<tag> (runs the entries without machines, and those naming it, on each device; needs the test permission on each)",
    ),
    pattern: optionalString("pattern").describe("a pytest -k style pattern (10.2)"),
    nodes: z
      .array(z.string({ error: "nodes must be a list of node names" }), { error: "nodes must be a list of node names" })
      .max(256, { error: "nodes: at most 256" })
      .nullish()
      .describe(`labgate: run the whole selection on each of these nodes at once ("${LOCAL_DEVICE}" is this gateway); answered like a dispatch ({} and X-Trigger-Id)`),
  },
  jsonObject,
);
export const triggerBodyB = z.looseObject(
  {
    config_name: configName,
    overrides: z.record(z.string(), z.unknown(), { error: "invalid overrides: expected an object" }).nullish(),
    trigger_id: optionalString("trigger_id"),
    test_suite_name: optionalString("test_suite_name"),
  },
  jsonObject,
);
/** GET /test-runs/{id}/report: CSV (the default) or the JSON form. */
export const reportQuery = z.object({
  format: z.enum(["csv", "json"], { error: (iss) => `unknown report format: ${String(iss.input)}` }).optional(),
  group_by: z
    .enum(["device"], { error: 'query parameter "group_by" must be device' })
    .optional()
    .describe("with format=json: [{device, total, passed, failed, skipped, rows}], devices with failures first (a run on managed devices)"),
});


/** GET /test-runs with filters and paging (labgate, for the console); without any the list is as before. */
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

/** POST /test-runs/{id}/repeat: the pattern of the cases to run again, or null for all. */
export const repeatBody = z.string({ error: "expected a JSON string (the test pattern) or null" }).nullable();

/** The trigger request of a parsed body; Variant B has no machine target, pattern or trigger id. */
function triggerRequest(body: z.output<typeof triggerBodyA>, variant: "A" | "B"): TriggerRequest {
  const a = variant === "A";
  return {
    configName: body.config_name,
    suite: body.test_suite_name ?? "",
    machineTarget: (a && body.machine_target) || null,
    overrides: body.overrides ?? null,
    pattern: (a && body.pattern) || "",
    ...(a && body.trigger_id != null ? { triggerId: body.trigger_id } : {}),
    ...(a && body.nodes ? { nodes: body.nodes } : {}),
  };
}

/** A run's CSV report, as a file answer named `filename`. */
function serveReport(c: Context<AppEnv>, csv: ReturnType<typeof statFile>, filename: string): Promise<Response> {
  if (!csv) throw new LabgateError("not_found", "Report file not found");
  return serveFile(c, csv, { headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": contentDisposition("attachment", filename) } });
}

/**
 * Streams the file named by the request path after `marker` from inside `dir`: decoded once
 * more so that `a%2Fb.txt` finds `a/b.txt`; nothing outside `dir`, no symlinks; HEAD supported.
 */
async function serveArtifact(c: Context<AppEnv>, dir: string, marker: string): Promise<Response> {
  const raw = c.req.path.slice(c.req.path.indexOf(marker) + marker.length);
  let name: string;
  try {
    name = decodeURIComponent(raw);
  } catch {
    throw new LabgateError("not_found", "Artifact file not found");
  }
  const file = await openArtifact(dir, name);
  if (!file) throw new LabgateError("not_found", "Artifact file not found");
  return serveFile(c, file, { headers: untrustedFileHeaders(file.basename, c.req.query("preview") === "true") });
}

/** A run whose report and artifacts may be fetched: known and in a final state. */
function completedRun(run: RunRecord | undefined): RunRecord {
  if (!run) throw new LabgateError("not_found", "Test run not found");
  if (!FINAL_STATUSES.has(run.status)) throw new LabgateError("not_found", "Test run not finished");
  return run;
}

/** What the run routes need: the run service, its record changes and the event streams. */
export interface RunRoutesDeps {
  service: TestRunService;
  changes: Broadcaster<RunChange>;
  streams: EventStreams;
}

export function runRoutes(ctx: AppContext, access: TestRunAccess, deps: RunRoutesDeps): Hono<AppEnv> {
  return ctx.config.test_server.api_variant === "B" ? variantB(ctx, access, deps.service) : variantA(ctx, access, deps);
}

function variantA(ctx: AppContext, access: TestRunAccess, { service, changes, streams }: RunRoutesDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const store = service.store;
  const triggerView = (t: TriggerRecord) => triggerObject(t, service.triggerStatus(t), store.runsOfTrigger(t.id));

  app.get("/api/v1/test-runs", access.read, (c) => {
    const query = queryOf(c, runListQuery);
    if (Object.values(query).every((v) => v === undefined)) return c.json(store.listRuns().map(runObjectA));
    const { runs, total } = store.queryRuns({
      ...(query.config_name !== undefined ? { configName: query.config_name } : {}),
      ...(query.status !== undefined ? { statuses: query.status } : {}),
      ...(query.trigger_id !== undefined ? { triggerId: query.trigger_id } : {}),
      newestFirst: query.order === "desc",
      ...(query.limit !== undefined ? { limit: query.limit } : {}),
      ...(query.offset !== undefined ? { offset: query.offset } : {}),
    });
    c.header("X-Total-Count", String(total));
    return c.json(runs.map(runObjectA));
  });

  // A change is read and encoded once, however many streams are open.
  const feed = new Broadcaster<PreparedEvent>();
  const subscription = new SharedSubscription(changes, (change) => {
    if (change.kind === "run-deleted") return feed.emit(prepareEvent("run-deleted", { id: change.id }));
    if (change.kind === "run") {
      const run = store.getRun(change.id);
      if (run) feed.emit(prepareEvent("run", runObjectA(run)));
      return;
    }
    const trigger = store.getTrigger(change.id);
    if (trigger) feed.emit(prepareEvent("trigger", triggerView(trigger)));
  });

  // Before /:id so that `stream` is never taken for a run id.
  app.get("/api/v1/test-runs/stream", access.read, (c) =>
    streams.respond(c.get("identity"), (send) => {
      const unsubscribe = feed.subscribe(send);
      const release = subscription.hold();
      return () => {
        unsubscribe();
        release();
      };
    }),
  );

  app.post("/api/v1/test-runs", access.write, async (c) => {
    const request = triggerRequest(await jsonBody(c, triggerBodyA), "A");
    const result = await service.trigger(request, { dispatch: true, identity: c.get("identity") });
    const target = result.kind === "dispatch" ? `trigger:${result.triggerId}` : `run:${result.run.id}`;
    await recordRequest(ctx, c, "testrun.trigger", target, { config: request.configName, suite: request.suite });
    if (result.kind === "dispatch") return c.json({}, 200, { "X-Trigger-Id": result.triggerId });
    return c.json(runObjectA(result.run));
  });

  // Trigger routes before /:id so that `trigger` is never taken for a run id.
  app.get("/api/v1/test-runs/trigger", access.read, (c) => c.json(store.listTriggers().map((t) => triggerView(t))));
  app.get("/api/v1/test-runs/trigger/:tid", access.read, (c) => {
    const trigger = store.getTrigger(c.req.param("tid"));
    if (!trigger) throw new LabgateError("not_found", "Trigger not found");
    return c.json(triggerView(trigger));
  });
  app.delete("/api/v1/test-runs/trigger/:tid", access.write, async (c) => {
    const trigger = await service.abortTrigger(c.req.param("tid"));
    await recordRequest(ctx, c, "testrun.abort", `trigger:${trigger.id}`);
    return c.json(triggerView(trigger));
  });

  app.get("/api/v1/test-runs/:id", access.read, (c) => {
    const run = store.getRun(c.req.param("id"));
    if (!run) throw new LabgateError("not_found", `Run not found: ${c.req.param("id")}`);
    return c.json(runObjectA(run));
  });

  app.delete("/api/v1/test-runs/:id", access.write, async (c) => {
    const run = await service.abort(c.req.param("id"));
    await recordRequest(ctx, c, "testrun.abort", `run:${run.id}`);
    return c.json(runObjectA(run));
  });

  app.delete("/api/v1/test-runs/:id/record", access.write, async (c) => {
    await service.deleteRun(c.req.param("id"));
    await recordRequest(ctx, c, "testrun.delete", `run:${c.req.param("id")}`);
    return c.json({});
  });

  app.post("/api/v1/test-runs/:id/repeat", access.write, async (c) => {
    const id = c.req.param("id");
    if (!store.getRun(id)) throw new LabgateError("not_found", `Run not found: ${id}`);
    const body = await jsonBody(c, repeatBody);
    const run = await service.repeat(id, body, c.get("identity"));
    await recordRequest(ctx, c, "testrun.trigger", `run:${run.id}`, { repeat_of: id });
    return c.json(runObjectA(run));
  });

  app.get("/api/v1/test-runs/:id/report", access.read, async (c) => {
    const run = completedRun(store.getRun(c.req.param("id")));
    const path = reportPath(service.dirs, run.id);
    const { format, group_by: groupBy } = queryOf(c, reportQuery);
    const csv = statFile(path);
    if (!csv) throw new LabgateError("not_found", "Report file not found");
    if (groupBy && format !== "json") throw new LabgateError("invalid", "group_by needs format=json");
    if (format === "json") {
      // Made from the CSV as it is sent: its validator follows the CSV's, but it has no byte ranges.
      return serveMade(c, fileEtag(csv.stat.size, csv.stat.mtime, groupBy ? "-json-device" : "-json"), { "content-type": "application/json" }, () =>
        (groupBy ? openReportJsonByDevice(path) : openReportJson(path)).catch((error: NodeJS.ErrnoException) => {
          if (error.code === "ENOENT") throw new LabgateError("not_found", "Report file not found");
          throw error;
        }),
      );
    }
    return serveReport(c, csv, `${run.id}.csv`);
  });

  app.get("/api/v1/test-runs/:id/report/summary", access.read, async (c) => {
    const run = completedRun(store.getRun(c.req.param("id")));
    return c.json(
      await reportSummary(reportPath(service.dirs, run.id), { byDevice: run.devices !== null }).catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") throw new LabgateError("not_found", "Report file not found");
        throw error;
      }),
    );
  });

  app.get("/api/v1/test-runs/:id/artifacts", access.read, async (c) => {
    const run = completedRun(store.getRun(c.req.param("id")));
    return c.json(await listArtifacts(artifactsDir(service.dirs, run.id)));
  });

  app.get("/api/v1/test-runs/:id/artifacts/*", access.read, async (c) => {
    const run = completedRun(store.getRun(c.req.param("id")));
    return serveArtifact(c, artifactsDir(service.dirs, run.id), "/artifacts/");
  });

  // Combined results of a trigger with `aggregate_results`, served like artifacts.
  const finishedTrigger = (id: string) => {
    const trigger = store.getTrigger(id);
    if (!trigger) throw new LabgateError("not_found", "Trigger not found");
    if (service.triggerStatus(trigger) === "running") throw new LabgateError("not_found", "Trigger not finished");
    return trigger;
  };
  app.get("/api/v1/test-runs/trigger/:tid/results", access.read, async (c) => {
    const trigger = finishedTrigger(c.req.param("tid"));
    return c.json(trigger.resultsDir ? await listArtifacts(join(service.dirs.results, trigger.resultsDir)) : []);
  });
  app.get("/api/v1/test-runs/trigger/:tid/results/*", access.read, async (c) => {
    const trigger = finishedTrigger(c.req.param("tid"));
    if (!trigger.resultsDir) throw new LabgateError("not_found", "Artifact file not found");
    return serveArtifact(c, join(service.dirs.results, trigger.resultsDir), "/results/");
  });

  return app;
}

/** Variant B ids are positive integers; anything else does not match a B route. */
function runB(service: TestRunService, raw: string): RunRecord {
  const run = /^[1-9][0-9]{0,15}$/.test(raw) ? service.store.getRunBySeq(Number(raw)) : undefined;
  if (!run) throw new LabgateError("not_found", "Test run not found");
  return run;
}

function variantB(ctx: AppContext, access: TestRunAccess, service: TestRunService): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const store = service.store;

  app.get("/api/v1/test-runs", access.read, (c) => c.json(store.listRuns().map(runObjectB)));

  app.post("/api/v1/test-runs", access.write, async (c) => {
    const request = triggerRequest(await jsonBody(c, triggerBodyB), "B");
    let result;
    try {
      result = await service.trigger(request, { dispatch: false });
    } catch (error) {
      // B answers 400 for a missing config, and for everything about the request.
      if (error instanceof PlanError && (error.problem === "config_missing" || error.problem === "bad_config_name")) throw new LabgateError("invalid", error.message);
      throw error;
    }
    if (result.kind !== "run") throw new LabgateError("invalid", "Variant B does not dispatch to other machines");
    await recordRequest(ctx, c, "testrun.trigger", `run:${result.run.id}`, { config: request.configName, suite: request.suite, seq: result.run.seq });
    return c.body(null, 200, { Location: `/api/v1/test-runs/${result.run.seq}` });
  });

  app.get("/api/v1/test-runs/:id", access.read, (c) => c.json(runObjectB(runB(service, c.req.param("id")))));

  app.delete("/api/v1/test-runs/:id", access.write, async (c) => {
    const run = runB(service, c.req.param("id"));
    if (FINAL_STATUSES.has(run.status)) throw new LabgateError("invalid", "Test run not in progress");
    await service.abort(run.id);
    await recordRequest(ctx, c, "testrun.abort", `run:${run.id}`, { seq: run.seq });
    await service.waitForEnd(run.id, ABORT_WAIT_B_MS);
    return c.json(runObjectB(store.getRun(run.id)!));
  });

  app.get("/api/v1/test-runs/:id/report", access.read, async (c) => {
    const run = completedRun(runB(service, c.req.param("id")));
    return serveReport(c, statFile(reportPath(service.dirs, run.id)), `report-run-${run.seq}.csv`);
  });

  return app;
}
