import { Hono, type Context } from "hono";
import * as z from "zod";
import { type Actor } from "../../audit/audit.ts";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import { errors, jsonBody, ok, route, routes, objectRefusals, type RouteHandler } from "../../http/openapi.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { rfc822 } from "../../util/time.ts";
import { getDevice } from "../devices/devices.ts";
import { authorize, permissionFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import type { DeploymentService } from "./service.ts";
import { checkValidation, deploymentView } from "./view.ts";
import { preflight } from "./preflight.ts";
import {
  Deployment,
  DeploymentCreate,
  DeploymentDevice,
  DeploymentDevicesQuery,
  DeploymentListQuery,
  DeploymentPreflight,
  DeploymentPreflightQuery,
  DeploymentRetry,
  DeploymentTimeline,
  HistoryQuery,
  UpdateHistoryEntry,
} from "./schema.ts";
import { buildTimeline } from "./timeline.ts";
import { deploymentTraces, getDeployment, listDeployments, listHistory, listMembers, type HistoryRow, type MemberRow } from "./store.ts";

const NOT_FOUND = "deployment does not exist";
const TOTAL = { "X-Total-Count": "how many match before paging" };
const write = { 400: errors[400], ...objectRefusals, 409: errors[409] };
const tag = "deployments";

const time = (iso: string | null) => (iso === null ? null : rfc822(new Date(iso)));

const memberView = (row: MemberRow): DeploymentDevice => ({
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
  attempt: row.attempt,
  failures: row.failures,
  retry_at: time(row.retry_at),
  offered: time(row.offered_at),
  updated: rfc822(new Date(row.updated)),
});

const historyView = (row: HistoryRow): UpdateHistoryEntry => ({
  id: row.id,
  deployment: row.deployment_id,
  from_version: row.from_version,
  to_version: row.to_version,
  outcome: row.outcome,
  attempt: row.attempt,
  reason: row.reason,
  output: row.output,
  at: rfc822(new Date(row.at)),
});

/**
 * Deployments (docs/update-server.md, "Deployments"): reading one needs `read` on its group, creating or changing
 * one `update` on it (admin scopes pass); update history: `read` on the device.
 */
export function deploymentRoutes(ctx: AppContext, auth: Auth, service: DeploymentService) {
  const { store } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const deploymentFor = async (c: Context<AppEnv>, perm: "read" | "update") => {
    const id = pathId(c.req.param("id"), "deployment");
    const row = await getDeployment(store.query, id);
    // A deployment of a group the caller may not read is as missing as one that does not exist.
    if (!row) throw new LabgateError("not_found", NOT_FOUND);
    try {
      await authorize(store.query, c.get("identity"), "group", row.group_id, "read");
    } catch (error) {
      if (error instanceof LabgateError && error.code === "not_found") throw new LabgateError("not_found", NOT_FOUND);
      throw error;
    }
    if (perm === "update") await authorize(store.query, c.get("identity"), "group", row.group_id, "update");
    return row;
  };

  const postDeployments = route(
    app,
    {
      method: "post",
      path: "/api/v2/deployments",
      tag,
      access: "management",
      summary: "Roll a version out to a group in phases (update on the group)",
      body: { json: DeploymentCreate },
      responses: { 201: ok(Deployment, "Created"), ...write },
    },
    mgmt,
    async (c, { body }) => {
      const identity = c.get("identity");
      await authorize(store.query, identity, "group", body.group, "update");
      if (body.validation) await checkValidation(store, identity, body.group, service);
      const row = await service.create({
        groupId: body.group,
        version: body.version,
        packages: body.packages,
        phases: body.phases,
        successPercent: body.success_percent,
        successWait: body.success_wait_minutes,
        errorPercent: body.error_percent,
        deviceTimeout: body.device_timeout_minutes,
        retries: body.retries,
        retryBackoff: body.retry_backoff_seconds,
        startAt: body.start_at,
        window: body.window,
        createdBy: identity.kind === "mgmt" ? identity.user : null,
        validation: body.validation,
        recover: body.recover,
        actor: actorOf(c, ctx.clock),
        identity,
      });
      return c.json(await deploymentView(service, row), 201);
    },
  );

  const getDeployments = route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments",
      tag,
      access: "management",
      summary: "Deployments of the groups the caller may read, newest first (X-Total-Count)",
      query: DeploymentListQuery,
      responses: { 200: { ...ok(z.array(Deployment), "OK"), headers: TOTAL }, 400: errors[400], 401: errors[401] },
    },
    mgmt,
    async (c, { query }) => {
      const { rows, total } = await listDeployments(
        store.query,
        { group: query.group, status: query.status, version: query.version, limit: query.limit ?? 50, offset: query.offset ?? 0 },
        permissionFilter(c.get("identity"), "group", "g"),
      );
      c.header("X-Total-Count", String(total));
      return c.json(await Promise.all(rows.map((row) => deploymentView(service, row))));
    },
  );

  const getDeploymentsById = route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/:id{[0-9]+}",
      tag,
      access: "management",
      summary: "One deployment with its counts per state and per phase",
      responses: { 200: ok(Deployment, "OK"), ...objectRefusals },
    },
    mgmt,
    async (c) => c.json(await deploymentView(service, await deploymentFor(c, "read"))),
  );

  const getDeploymentsPreflight = route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/preflight",
      tag,
      access: "management",
      summary: "What a deployment of a version to a group would run into (devices that require signatures and would refuse its packages), before it is made",
      query: DeploymentPreflightQuery,
      responses: { 200: ok(DeploymentPreflight, "OK"), 400: errors[400], ...objectRefusals },
    },
    mgmt,
    async (c, { query }) => c.json(await preflight(ctx, ctx.config.prefix, c.get("identity"), query)),
  );

  const getDeploymentsByIdDevices = route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/:id{[0-9]+}/devices",
      tag,
      access: "management",
      summary: "A deployment's devices in their recorded order, with states and failure reasons (X-Total-Count)",
      query: DeploymentDevicesQuery,
      responses: { 200: { ...ok(z.array(DeploymentDevice), "OK"), headers: TOTAL }, 400: errors[400], ...objectRefusals },
    },
    mgmt,
    async (c, { query }) => {
      const row = await deploymentFor(c, "read");
      const { rows, total } = await listMembers(store.query, row.id, { state: query.state, phase: query.phase, limit: query.limit ?? 100, offset: query.offset ?? 0 });
      c.header("X-Total-Count", String(total));
      return c.json(rows.map(memberView));
    },
  );

  const getDeploymentsByIdTimeline = route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/:id{[0-9]+}/timeline",
      tag,
      access: "management",
      summary: "A deployment's device counts per state over time: at its creation, every minute (or more, at most 360 points) and now",
      responses: { 200: ok(DeploymentTimeline, "OK"), ...objectRefusals },
    },
    mgmt,
    async (c) => {
      const row = await deploymentFor(c, "read");
      const at = (iso: string) => Date.parse(iso);
      const traces = (await deploymentTraces(store.query, row.id)).map((t) => ({
        device: t.device_id,
        state: t.state,
        attempt: t.attempt,
        offeredAt: t.offered_at === null ? null : at(t.offered_at),
        updated: at(t.updated),
        outcomes: t.outcomes.map((o) => ({ outcome: o.outcome, attempt: o.attempt, at: at(o.at) })),
      }));
      const start = at(row.created);
      const timeline = buildTimeline(traces, start, Math.max(start, row.finished ? at(row.finished) : ctx.clock.now()));
      return c.json({ deployment: row.id, step_minutes: timeline.step, points: timeline.points.map((p) => ({ at: rfc822(new Date(p.at)), counts: p.counts })) } satisfies DeploymentTimeline);
    },
  );

  const commandOp = (summary: string) => ({ tag, access: "management", summary, responses: { 200: ok(Deployment, "OK"), ...write } }) as const;
  const command = (action: (id: number, actor: Actor) => Promise<void>): RouteHandler<AppEnv, ReturnType<typeof commandOp>> => async (c) => {
    const row = await deploymentFor(c, "update");
    await action(row.id, actorOf(c, ctx.clock));
    return c.json(await deploymentView(service, (await getDeployment(store.query, row.id))!));
  };
  const postDeploymentsByIdPause = route(app, { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/pause", ...commandOp("No new offers until resumed") }, mgmt, command((id, actor) => service.pause(id, actor)));
  const postDeploymentsByIdResume = route(app, { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/resume", ...commandOp("Offers again") }, mgmt, command((id, actor) => service.resume(id, actor)));
  const postDeploymentsByIdAbort = route(
    app,
    { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/abort", ...commandOp("No more offers; downloads are told to stop; the group's policy stays") },
    mgmt,
    command((id, actor) => service.abort(id, actor)),
  );
  const postDeploymentsByIdAdvance = route(
    app,
    { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/advance", ...commandOp("Start the next phase now, whatever its gate says") },
    mgmt,
    command((id, actor) => service.advance(id, actor)),
  );

  const postDeploymentsByIdRetry = route(
    app,
    {
      method: "post",
      path: "/api/v2/deployments/:id{[0-9]+}/retry",
      tag,
      access: "management",
      summary: "Failed devices (all, or those listed) get their retries again; a completed deployment reopens (update on the group)",
      body: { json: DeploymentRetry, parsedBy: "handler" },
      responses: { 200: ok(Deployment, "OK"), ...write },
    },
    mgmt,
    async (c) => {
      // No body: every failed device.
      const body = c.req.header("content-type") === undefined && Number(c.req.header("content-length") ?? 0) === 0 ? {} : await jsonBody(c, DeploymentRetry);
      const row = await deploymentFor(c, "update");
      await service.retry(row.id, actorOf(c, ctx.clock), body.devices);
      return c.json(await deploymentView(service, (await getDeployment(store.query, row.id))!));
    },
  );

  const getDevicesByIdUpdateHistory = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/update-history",
      tag: "updates",
      access: "management",
      summary: "A device's update history, newest first (X-Total-Count)",
      query: HistoryQuery,
      responses: { 200: { ...ok(z.array(UpdateHistoryEntry), "OK"), headers: TOTAL }, 400: errors[400], ...objectRefusals },
    },
    mgmt,
    async (c, { query }) => {
      const id = pathId(c.req.param("id"), "device");
      await authorize(store.query, c.get("identity"), "device", id, "read");
      if (!(await getDevice(store.query, id))) throw new LabgateError("not_found", "device does not exist");
      const { rows, total } = await listHistory(store.query, id, query.limit ?? 100, query.offset ?? 0);
      c.header("X-Total-Count", String(total));
      return c.json(rows.map(historyView));
    },
  );

  return routes(app, postDeployments, getDeployments, getDeploymentsById, getDeploymentsPreflight, getDeploymentsByIdDevices, getDeploymentsByIdTimeline, postDeploymentsByIdPause, postDeploymentsByIdResume, postDeploymentsByIdAbort, postDeploymentsByIdAdvance, postDeploymentsByIdRetry, getDevicesByIdUpdateHistory);
}
