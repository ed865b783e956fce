/**
 * Run routes: Variant A by default, Variant B with
 * `test_server.api_variant: B`. Handlers parse, authorize and call the run service.
 */
import { join } from "node:path";
import { recordRequest } from "../../http/actor.ts";
import { accessGeneration, type AccessWatch } from "../../auth/authority.ts";
import { Hono, type Context } from "hono";
import type { AppContext, AppEnv, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { statFile } from "../../util/files.ts";
import { contentDisposition, fileEtag, serveFile, serveMade, serveStored, untrustedFileHeaders } from "../../storage/send.ts";
import * as z from "zod";
import { Empty, errors, ok, route, routes, type Reply } from "../../http/openapi.ts";
import type { RunStreamEventData, RunStreamEventName } from "../../protocol/streams.ts";
import { prepareEvent, SharedSubscription, type Broadcaster, type EventStreams, type PreparedEvent, type SendEvent } from "../../http/sse.ts";
import { openReportJson, openReportJsonByDevice, reportSummary } from "../engine/report.ts";
import { PlanError } from "../plan.ts";
import { listArtifacts, openArtifact } from "../runs/artifacts.ts";
import { artifactsDir, reportPath } from "../paths.ts";
import { artifactKey, sharedStore } from "../runs/shared.ts";
import { triggerStatusOf, type TestRunService } from "../runs/service.ts";
import { DeviceSight, seenRun, type SeenRun } from "../runs/sight.ts";
import { authorizeStop } from "../devices/access.ts";
import type { TriggerRequest } from "../runs/trigger.ts";
import { FINAL_STATUSES, type RunChange, type RunRecord, type TriggerRecord } from "../runs/store.ts";
import { runObjectA, runObjectB, triggerObject } from "../runs/views.ts";
import type { TestRunAccess } from "./access.ts";
import { e422Config } from "./configs.ts";
import {
  Artifact,
  DeviceReport,
  previewQuery,
  repeatBody,
  ReportRow,
  reportQuery,
  ReportSummary,
  runListQuery,
  TestRun,
  TestRunB,
  Trigger,
  triggerBodyA,
  triggerBodyB,
  type TriggerBody,
} from "../schema.ts";

const csv: Reply = { description: "The CSV report (columns: test_server.report_columns)", media: "text/csv" };
const file: Reply = { description: "The file", media: "application/octet-stream" };

/**
 * How long a Variant B DELETE waits for a signalled running run to stop: B answers the run "now
 * aborted", and a process that ignores SIGTERM gets SIGKILL after 5 s. Variant A
 * answers at once, the run still `running` with `abort_requested: true`.
 */
const ABORT_WAIT_B_MS = 7_000;

/** The trigger request of a parsed body; Variant B has no machine target, pattern or trigger id. */
function triggerRequest(body: TriggerBody, variant: "A" | "B"): TriggerRequest {
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

/**
 * A run's CSV report as its reader sees it, as a file answer named `filename`: the file itself,
 * or made as it is sent without the rows of the devices left out (no byte ranges then).
 */
async function serveReport(c: Context<AppEnv>, service: TestRunService, seen: SeenRun, filename: string): Promise<Response> {
  await service.localReport(seen.run.id);
  const csv = statFile(reportPath(service.dirs, seen.run.id));
  if (!csv) throw new LabgateError("not_found", "Report file not found");
  const headers = { "content-type": "text/csv; charset=utf-8", "content-disposition": contentDisposition("attachment", filename) };
  if (seen.whole) return serveFile(c, csv, { headers });
  const source = service.reportSource(seen);
  return serveMade(c, fileEtag(csv.stat.size, csv.stat.mtime, `-csv${seen.variant}`), headers, async () => {
    const stream = await source().catch(noReport);
    return { stream, close: async () => void stream.destroy() };
  });
}

/**
 * Streams the file named by the request path after `marker` from inside `dir`: decoded once
 * more so that `a%2Fb.txt` finds `a/b.txt`; nothing outside `dir`, no symlinks, nothing `keeps`
 * refuses (a device's the reader may not see); HEAD supported.
 */
async function serveArtifact(c: Context<AppEnv>, dir: string, marker: string, keeps: (name: string) => boolean = () => true, elsewhere?: (name: string, headers: Record<string, string>) => Promise<Response | undefined>): Promise<Response> {
  const raw = c.req.path.slice(c.req.path.indexOf(marker) + marker.length);
  let name: string;
  try {
    name = decodeURIComponent(raw);
  } catch {
    throw new LabgateError("not_found", "Artifact file not found");
  }
  if (!keeps(name)) throw new LabgateError("not_found", "Artifact file not found");
  const file = await openArtifact(dir, name);
  if (file) return serveFile(c, file, { headers: await untrustedFileHeaders(file.basename, c.req.query("preview") === "true") });
  const other = await elsewhere?.(name, await untrustedFileHeaders(name.slice(name.lastIndexOf("/") + 1), c.req.query("preview") === "true"));
  if (!other) throw new LabgateError("not_found", "Artifact file not found");
  return other;
}

/** A report that is gone by the time it is read: 404. */
function noReport(error: NodeJS.ErrnoException): never {
  if (error.code === "ENOENT") throw new LabgateError("not_found", "Report file not found");
  throw error;
}

/** A run whose report and artifacts may be fetched: known and in a final state. */
function completedRun<T extends { run: RunRecord }>(seen: T | undefined): T {
  if (!seen) throw new LabgateError("not_found", "Test run not found");
  if (!FINAL_STATUSES.has(seen.run.status)) throw new LabgateError("not_found", "Test run not finished");
  return seen;
}

/** What the run routes need: the run service, its record changes, the event streams and who may still read them. */
export interface RunRoutesDeps {
  service: TestRunService;
  changes: Broadcaster<RunChange>;
  streams: EventStreams;
  accessWatch: AccessWatch;
}

export function runRoutes(ctx: AppContext, access: TestRunAccess, deps: RunRoutesDeps): Hono<AppEnv> {
  return ctx.config.test_server.api_variant === "B" ? variantB(ctx, access, deps.service) : variantA(ctx, access, deps);
}

/** One event of the run stream, its data checked against src/protocol/streams.ts. */
const runEvent = <N extends RunStreamEventName>(name: N, data: RunStreamEventData[N]): PreparedEvent => prepareEvent(name, data);

/** An open run stream: whose it is, which devices its reader may see, where its events go. */
interface Viewer {
  identity: Identity | undefined;
  sight: DeviceSight;
  send: SendEvent;
}

/** Variant A's routes, the console's: their operations are its client's registry (src/server/api.ts). */
export type RunRoutesA = ReturnType<typeof variantA>;

function variantA(ctx: AppContext, access: TestRunAccess, { service, changes, streams, accessWatch }: RunRoutesDeps) {
  const app = new Hono<AppEnv>();
  const { doc, replies } = access;
  const store = service.store;
  const sightOf = (c: Context<AppEnv>) => service.sight(c.get("identity"));
  const runView = (run: RunRecord, sight: DeviceSight) => runObjectA(seenRun(run, sight).run);
  /** A trigger with its runs (`runs`) as `sight` sees it, and what tells its view apart from other readers'. */
  const seenTrigger = (t: TriggerRecord, runs: RunRecord[], sight: DeviceSight) => {
    const seen = runs.map((r) => seenRun(r, sight));
    return { object: triggerObject(t, triggerStatusOf(t, runs), seen.map((r) => r.run)), variant: seen.map((r) => r.variant).join("") };
  };
  const triggerView = async (t: TriggerRecord, sight: DeviceSight) => seenTrigger(t, await store.runsOfTrigger(t.id), sight).object;
  /** The run the path names as its reader sees it, once final: its report and artifacts may be fetched. */
  const finishedRun = async (c: Context<AppEnv>) => completedRun(await service.seen(c.req.param("id") ?? "", await sightOf(c)));
  /** The run the path names, if the caller may also stop or delete it (a run on devices: what its devices require). */
  const stoppableRun = async (c: Context<AppEnv>, message: string): Promise<RunRecord> => {
    const run = await store.getRun(c.req.param("id") ?? "");
    if (!run) throw new LabgateError("not_found", message);
    await authorizeStop(ctx.store.query, c.get("identity"), run, await store.planOf(run.id));
    return run;
  };

  const getTestRuns = route(
    app,
    {
      method: "get",
      path: "/api/v1/test-runs",
      ...doc,
      summary: "Runs (creation order; filters and paging with X-Total-Count)",
      query: runListQuery,
      responses: replies({ 200: { ...ok(z.array(TestRun), "OK"), headers: { "X-Total-Count": "with any query parameter: how many runs match before paging" } }, 400: errors[400] }),
    },
    access.read,
    async (c, { query }) => {
      const sight = await sightOf(c);
      if (Object.values(query).every((v) => v === undefined)) return c.json((await store.listRuns()).map((r) => runView(r, sight)));
      const { runs, total } = await store.queryRuns({
        ...(query.config_name !== undefined ? { configName: query.config_name } : {}),
        ...(query.status !== undefined ? { statuses: query.status } : {}),
        ...(query.trigger_id !== undefined ? { triggerId: query.trigger_id } : {}),
        newestFirst: query.order === "desc",
        ...(query.limit !== undefined ? { limit: query.limit } : {}),
        ...(query.offset !== undefined ? { offset: query.offset } : {}),
      });
      c.header("X-Total-Count", String(total));
      return c.json(runs.map((r) => runView(r, sight)));
    },
  );

  // A change is read once, and encoded once for each view of it that the open streams' readers
  // get (one, unless a run's devices are hidden from some). Their sights are made again, once per
  // user and scopes, when the access generation has moved.
  const viewers = new Set<Viewer>();
  let generation = -1;
  // `current`: the reader's identity as it stands now (a reason when it no longer counts).
  const viewerSight = async (current: Identity | string | undefined, shared: Map<string, Promise<DeviceSight>>): Promise<DeviceSight> => {
    if (typeof current === "string") return DeviceSight.NONE; // its watch ends the stream
    if (current?.kind !== "mgmt") return service.sight(current);
    const key = `${current.user}\n${[...current.scopes].sort().join(" ")}`;
    let sight = shared.get(key);
    if (!sight) shared.set(key, (sight = service.sight(current)));
    return sight;
  };
  // Changes go out in order, each after the one before: reading the access generation is a query.
  let delivered = Promise.resolve();
  const subscription = new SharedSubscription(changes, (change) => {
    delivered = delivered.then(() => deliver(change)).catch((error: Error) => ctx.log.warn(`test-run stream: ${error.message}`));
  });
  const deliver = async (change: RunChange) => {
    if (change.kind === "run-deleted") {
      const event = runEvent("run-deleted", { id: change.id });
      for (const viewer of viewers) viewer.send(event);
      return;
    }
    const now = await accessGeneration(ctx.store.query);
    if (now !== generation) {
      generation = now;
      const shared = new Map<string, Promise<DeviceSight>>();
      for (const viewer of viewers) viewer.sight = await viewerSight(viewer.identity?.kind === "mgmt" ? await accessWatch.current(viewer.identity) : viewer.identity, shared);
    }
    const prepared = new Map<string, PreparedEvent>();
    // A run's event is the record its change wrote, so that a stream sees every state it passed through.
    const run = change.kind === "run" ? change.run : undefined;
    const trigger = change.kind === "trigger" ? change.trigger : undefined;
    const triggerRuns = trigger ? await store.runsOfTrigger(trigger.id) : [];
    for (const viewer of viewers) {
      let view: { variant: string; event: () => PreparedEvent };
      if (run) {
        const seen = seenRun(run, viewer.sight);
        view = { variant: seen.variant, event: () => runEvent("run", runObjectA(seen.run)) };
      } else if (trigger) {
        const seen = seenTrigger(trigger, triggerRuns, viewer.sight);
        view = { variant: seen.variant, event: () => runEvent("trigger", seen.object) };
      } else return;
      let event = prepared.get(view.variant);
      if (!event) prepared.set(view.variant, (event = view.event()));
      viewer.send(event);
    }
  };

  // Before /:id so that `stream` is never taken for a run id.
  const getTestRunsStream = route(
    app,
    {
      method: "get",
      path: "/api/v1/test-runs/stream",
      ...doc,
      summary: "Live run changes (SSE): events run (a run object), trigger (a trigger object), run-deleted ({id})",
      responses: replies({ 200: { description: "Event stream", media: "text/event-stream" } }),
    },
    access.read,
    async (c) => {
      const identity = c.get("identity");
      const sight = await viewerSight(identity, new Map());
      return streams.respond(identity, (send) => {
        const viewer: Viewer = { identity, sight, send };
        viewers.add(viewer);
        const release = subscription.hold();
        return () => {
          viewers.delete(viewer);
          release();
        };
      });
    },
  );

  const postTestRuns = route(
    app,
    {
      method: "post",
      path: "/api/v1/test-runs",
      ...doc,
      summary: "Start a run (here, on managed devices: machine_target or machines device:/group:/tag:), or dispatch to lab nodes ({} and X-Trigger-Id)",
      body: { json: triggerBodyA },
      responses: replies({
        200: { description: "The run; {} for a dispatch", json: TestRun.or(Empty), headers: { "X-Trigger-Id": "a dispatch: the trigger that follows its runs on the nodes" } },
        400: errors[400],
        403: { description: "Without svc_tests_rw, or without the `test` permission on a device the targets name (the devices are named)", json: errors[403].json },
        404: errors[404],
        422: e422Config,
        500: { description: "A node could not be reached", json: errors[400].json },
      }),
    },
    access.write,
    async (c, { body }) => {
      const request = triggerRequest(body, "A");
      const result = await service.trigger(request, { dispatch: true, identity: c.get("identity") });
      const target = result.kind === "dispatch" ? `trigger:${result.triggerId}` : `run:${result.run.id}`;
      await recordRequest(ctx, c, "testrun.trigger", target, { config: request.configName, suite: request.suite });
      if (result.kind === "dispatch") return c.json({}, 200, { "X-Trigger-Id": result.triggerId });
      return c.json(runView(result.run, await sightOf(c)));
    },
  );

  // Trigger routes before /:id so that `trigger` is never taken for a run id.
  const getTestRunsTrigger = route(
    app,
    { method: "get", path: "/api/v1/test-runs/trigger", ...doc, summary: "Triggers", responses: replies({ 200: ok(z.array(Trigger), "OK") }) },
    access.read,
    async (c) => {
      const sight = await sightOf(c);
      const runs = new Map<string, RunRecord[]>();
      for (const run of await store.listRuns()) {
        const ofTrigger = runs.get(run.triggerId);
        if (ofTrigger) ofTrigger.push(run);
        else runs.set(run.triggerId, [run]);
      }
      return c.json((await store.listTriggers()).map((t) => seenTrigger(t, runs.get(t.id) ?? [], sight).object));
    },
  );
  const getTestRunsTriggerByTid = route(
    app,
    { method: "get", path: "/api/v1/test-runs/trigger/:tid", ...doc, summary: "One trigger", responses: replies({ 200: ok(Trigger, "OK"), 404: errors[404] }) },
    access.read,
    async (c) => {
      const trigger = await store.getTrigger(c.req.param("tid") ?? "");
      if (!trigger) throw new LabgateError("not_found", "Trigger not found");
      return c.json(await triggerView(trigger, await sightOf(c)));
    },
  );
  const deleteTestRunsTriggerByTid = route(
    app,
    { method: "delete", path: "/api/v1/test-runs/trigger/:tid", ...doc, summary: "Abort a trigger", responses: replies({ 200: ok(Trigger, "Aborting"), 404: errors[404] }) },
    access.write,
    async (c) => {
      const id = c.req.param("tid") ?? "";
      for (const run of await store.runsOfTrigger(id)) if (!FINAL_STATUSES.has(run.status)) await authorizeStop(ctx.store.query, c.get("identity"), run, await store.planOf(run.id));
      const trigger = await service.abortTrigger(id);
      await recordRequest(ctx, c, "testrun.abort", `trigger:${trigger.id}`);
      return c.json(await triggerView(trigger, await sightOf(c)));
    },
  );

  const getTestRunsById = route(
    app,
    { method: "get", path: "/api/v1/test-runs/:id", ...doc, summary: "One run", responses: replies({ 200: ok(TestRun, "OK"), 404: errors[404] }) },
    access.read,
    async (c) => {
      const id = c.req.param("id") ?? "";
      const seen = await service.seen(id, await sightOf(c));
      if (!seen) throw new LabgateError("not_found", `Run not found: ${id}`);
      return c.json(runObjectA(seen.run));
    },
  );

  const deleteTestRunsById = route(
    app,
    { method: "delete", path: "/api/v1/test-runs/:id", ...doc, summary: "Abort a run (answers at once, abort_requested; the run ends aborted)", responses: replies({ 200: ok(TestRun, "Aborting"), 400: errors[400], 404: errors[404] }) },
    access.write,
    async (c) => {
      const run = await service.abort((await stoppableRun(c, "Test run not found")).id);
      await recordRequest(ctx, c, "testrun.abort", `run:${run.id}`);
      return c.json(runView(run, await sightOf(c)));
    },
  );

  const deleteTestRunsByIdRecord = route(
    app,
    { method: "delete", path: "/api/v1/test-runs/:id/record", ...doc, summary: "Delete a finished run: its record, report and artifacts", responses: replies({ 200: ok(), 404: errors[404], 409: errors[409] }) },
    access.write,
    async (c) => {
      const id = (await stoppableRun(c, `Run not found: ${c.req.param("id") ?? ""}`)).id;
      await service.deleteRun(id);
      await recordRequest(ctx, c, "testrun.delete", `run:${id}`);
      return c.json({});
    },
  );

  const postTestRunsByIdRepeat = route(
    app,
    {
      method: "post",
      path: "/api/v1/test-runs/:id/repeat",
      ...doc,
      summary: "Run cases of a run again",
      body: { json: repeatBody },
      responses: replies({ 200: ok(TestRun, "The new run"), 400: errors[400], 404: errors[404], 422: e422Config }),
    },
    access.write,
    async (c, { body }) => {
      const id = c.req.param("id") ?? "";
      if (!(await store.getRun(id))) throw new LabgateError("not_found", `Run not found: ${id}`);
      const run = await service.repeat(id, body, c.get("identity"));
      await recordRequest(ctx, c, "testrun.trigger", `run:${run.id}`, { repeat_of: id });
      return c.json(runView(run, await sightOf(c)));
    },
  );

  const getTestRunsByIdReport = route(
    app,
    {
      method: "get",
      path: "/api/v1/test-runs/:id/report",
      ...doc,
      summary: "The report: CSV, or ?format=json (one object per row, keys = the columns; &group_by=device: grouped by device with counts, failures first)",
      query: reportQuery,
      responses: replies({ 200: { ...csv, json: z.array(ReportRow).or(DeviceReport) }, 400: errors[400], 404: errors[404] }),
    },
    access.read,
    async (c, { query: { format, group_by: groupBy } }) => {
      const seen = await finishedRun(c);
      await service.localReport(seen.run.id);
      const csv = statFile(reportPath(service.dirs, seen.run.id));
      if (!csv) throw new LabgateError("not_found", "Report file not found");
      if (groupBy && format !== "json") throw new LabgateError("invalid", "group_by needs format=json");
      if (format === "json") {
        // Made from the CSV as it is sent: its validator follows the CSV's (and the reader's sight), but it has no byte ranges.
        const source = service.reportSource(seen);
        return serveMade(c, fileEtag(csv.stat.size, csv.stat.mtime, `${groupBy ? "-json-device" : "-json"}${seen.variant}`), { "content-type": "application/json" }, () =>
          (groupBy ? openReportJsonByDevice(source) : openReportJson(source)).catch(noReport),
        );
      }
      return serveReport(c, service, seen, `${seen.run.id}.csv`);
    },
  );

  const getTestRunsByIdReportSummary = route(
    app,
    { method: "get", path: "/api/v1/test-runs/:id/report/summary", ...doc, summary: "The report's row counts by status", responses: replies({ 200: ok(ReportSummary, "OK"), 404: errors[404] }) },
    access.read,
    async (c) => {
      const seen = await finishedRun(c);
      await service.localReport(seen.run.id);
      return c.json(await reportSummary(service.reportSource(seen), { byDevice: seen.run.devices !== null }).catch(noReport));
    },
  );

  const getTestRunsByIdArtifacts = route(
    app,
    { method: "get", path: "/api/v1/test-runs/:id/artifacts", ...doc, summary: "The run's artifact files", responses: replies({ 200: ok(z.array(Artifact), "OK"), 404: errors[404] }) },
    access.read,
    async (c) => {
      const seen = await finishedRun(c);
      return c.json((await service.artifactsOf(seen.run.id)).filter((a) => seen.keepsArtifact(a.name)));
    },
  );

  const getTestRunsByIdArtifactsPath = route(
    app,
    { method: "get", path: "/api/v1/test-runs/:id/artifacts/*", ...doc, summary: "One artifact (?preview=true: inline)", query: previewQuery, responses: replies({ 200: file, 404: errors[404] }) },
    access.read,
    async (c) => {
      const seen = await finishedRun(c);
      return serveArtifact(c, artifactsDir(service.dirs, seen.run.id), "/artifacts/", seen.keepsArtifact, async (name, headers) => {
        const shared = sharedStore(ctx.objects);
        const key = shared && artifactKey(seen.run.id, name);
        return key ? serveStored(c, shared, key, { headers }) : undefined;
      });
    },
  );

  // Combined results of a trigger with `aggregate_results`, served like artifacts.
  const finishedTrigger = async (id: string) => {
    const trigger = await store.getTrigger(id);
    if (!trigger) throw new LabgateError("not_found", "Trigger not found");
    if ((await service.triggerStatus(trigger)) === "running") throw new LabgateError("not_found", "Trigger not finished");
    return trigger;
  };
  const getTestRunsTriggerByTidResults = route(
    app,
    { method: "get", path: "/api/v1/test-runs/trigger/:tid/results", ...doc, summary: "Combined results of an aggregating trigger", responses: replies({ 200: ok(z.array(Artifact), "OK"), 404: errors[404] }) },
    access.read,
    async (c) => {
      const trigger = await finishedTrigger(c.req.param("tid") ?? "");
      return c.json(trigger.resultsDir ? await listArtifacts(join(service.dirs.results, trigger.resultsDir)) : []);
    },
  );
  const getTestRunsTriggerByTidResultsPath = route(
    app,
    { method: "get", path: "/api/v1/test-runs/trigger/:tid/results/*", ...doc, summary: "One combined result file", query: previewQuery, responses: replies({ 200: file, 404: errors[404] }) },
    access.read,
    async (c) => {
      const trigger = await finishedTrigger(c.req.param("tid") ?? "");
      if (!trigger.resultsDir) throw new LabgateError("not_found", "Artifact file not found");
      return serveArtifact(c, join(service.dirs.results, trigger.resultsDir), "/results/");
    },
  );

  return routes(app, getTestRuns, getTestRunsStream, postTestRuns, getTestRunsTrigger, getTestRunsTriggerByTid, deleteTestRunsTriggerByTid, getTestRunsById, deleteTestRunsById, deleteTestRunsByIdRecord, postTestRunsByIdRepeat, getTestRunsByIdReport, getTestRunsByIdReportSummary, getTestRunsByIdArtifacts, getTestRunsByIdArtifactsPath, getTestRunsTriggerByTidResults, getTestRunsTriggerByTidResultsPath);
}

/** Variant B ids are positive integers; anything else does not match a B route. */
async function runByVariantBId(service: TestRunService, raw: string): Promise<RunRecord> {
  const run = /^[1-9][0-9]{0,15}$/.test(raw) ? await service.store.getRunBySeq(Number(raw)) : undefined;
  if (!run) throw new LabgateError("not_found", "Test run not found");
  return run;
}

function variantB(ctx: AppContext, access: TestRunAccess, service: TestRunService): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const { doc, replies } = access;
  const store = service.store;

  const getTestRuns = route(
    app,
    { method: "get", path: "/api/v1/test-runs", ...doc, summary: "Runs", responses: replies({ 200: ok(z.array(TestRunB), "OK") }) },
    access.read,
    async (c) => {
      const sight = await service.sight(c.get("identity"));
      return c.json((await store.listRuns()).map((r) => runObjectB(seenRun(r, sight).run)));
    },
  );

  const postTestRuns = route(
    app,
    {
      method: "post",
      path: "/api/v1/test-runs",
      ...doc,
      summary: "Start a run (Location header)",
      body: { json: triggerBodyB },
      responses: replies({ 200: { description: "Started (no body)", headers: { Location: "/api/v1/test-runs/<id>" } }, 400: errors[400], 422: e422Config }),
    },
    access.write,
    async (c, { body }) => {
      const request = triggerRequest(body, "B");
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
    },
  );

  const getTestRunsById = route(
    app,
    { method: "get", path: "/api/v1/test-runs/:id", ...doc, summary: "One run", responses: replies({ 200: ok(TestRunB, "OK"), 404: errors[404] }) },
    access.read,
    async (c) => c.json(runObjectB(seenRun(await runByVariantBId(service, c.req.param("id") ?? ""), await service.sight(c.get("identity"))).run)),
  );

  const deleteTestRunsById = route(
    app,
    { method: "delete", path: "/api/v1/test-runs/:id", ...doc, summary: "Abort a run (waits for its end)", responses: replies({ 200: ok(TestRunB, "Aborted"), 400: errors[400], 404: errors[404] }) },
    access.write,
    async (c) => {
      const run = await runByVariantBId(service, c.req.param("id") ?? "");
      await authorizeStop(ctx.store.query, c.get("identity"), run, await store.planOf(run.id));
      if (FINAL_STATUSES.has(run.status)) throw new LabgateError("invalid", "Test run not in progress");
      await service.abort(run.id);
      await recordRequest(ctx, c, "testrun.abort", `run:${run.id}`, { seq: run.seq });
      await service.waitForEnd(run.id, ABORT_WAIT_B_MS);
      return c.json(runObjectB(seenRun((await store.getRun(run.id))!, await service.sight(c.get("identity"))).run));
    },
  );

  const getTestRunsByIdReport = route(
    app,
    { method: "get", path: "/api/v1/test-runs/:id/report", ...doc, summary: "The CSV report", responses: replies({ 200: csv, 404: errors[404] }) },
    access.read,
    async (c) => {
      const seen = completedRun(seenRun(await runByVariantBId(service, c.req.param("id") ?? ""), await service.sight(c.get("identity"))));
      return serveReport(c, service, seen, `report-run-${seen.run.seq}.csv`);
    },
  );

  return routes(app, getTestRuns, postTestRuns, getTestRunsById, deleteTestRunsById, getTestRunsByIdReport);
}
