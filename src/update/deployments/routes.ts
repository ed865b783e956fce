import { Hono, type Context } from "hono";
import * as z from "zod";
import { actorOf, type Actor } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import { errors, jsonBody, ok, queryOf, route, onObject } from "../../http/openapi.ts";
import type { AppContext, AppEnv, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { rfc822 } from "../../util/time.ts";
import { getDevice, signatureRequirements } from "../devices/devices.ts";
import { packageKeys, packagesOfVersion } from "../packages/packages.ts";
import { signatureWarnings } from "../packages/signing.ts";
import { allowed, authorize, permissionFilter } from "../permissions/permissions.ts";
import { groupDeviceIds } from "../groups/groups.ts";
import type { Database } from "../../db/index.ts";
import { pathId } from "../validation.ts";
import { sumOf, SUCCEEDED, totalOf } from "./model.ts";
import type { DeploymentService } from "./service.ts";
import {
  Deployment,
  DeploymentCreate,
  DeploymentDevice,
  DeploymentDevicesQuery,
  DeploymentListQuery,
  DeploymentPreflight,
  DeploymentPreflightQuery,
  DeploymentRetry,
  DEVICE_STATES,
  HistoryQuery,
  UpdateHistoryEntry,
  type Counts,
  type DeploymentValidation,
} from "./schema.ts";
import { getDeployment, listDeployments, listHistory, listMembers, parsePhases, parsePhaseStarted, parseWindow, type DeploymentRow, type HistoryRow, type MemberRow } from "./store.ts";

const NOT_FOUND = "deployment does not exist";
const TOTAL = { "X-Total-Count": "how many match before paging" };
const { 400: e400, 401: e401, 409: e409 } = errors;
const write = { 400: e400, ...onObject, 409: e409 };
const tag = "deployments";

const time = (iso: string | null) => (iso === null ? null : rfc822(new Date(iso)));

/** A deployment as the API shows it, with its counts per state and per phase. */
export function deploymentView(service: DeploymentService, row: DeploymentRow): Deployment {
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
    retries: row.retries,
    retry_backoff_seconds: row.retry_backoff,
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
 * and the `test` permission on each of them (403 naming those it lacks); the service then pins
 * the config, which must run on a device here (src/testrun/devices/validation.ts).
 */
function checkValidation(db: Database, identity: Identity, groupId: number, service: DeploymentService): void {
  if (!service.validator) throw new LabgateError("invalid", `field "validation": this server runs no tests`);
  if (identity.kind !== "mgmt" || !(identity.scopes.has("tests_rw") || identity.scopes.has("admin_rw"))) throw new LabgateError("forbidden", `field "validation": needs svc_tests_rw`);
  const refused = groupDeviceIds(db, groupId)
    .filter((id) => !allowed(db, identity, "device", id, "test"))
    .map((id) => getDevice(db, id))
    .map((d) => `'${d?.name || d?.mac_address}'`);
  if (refused.length > 0) throw new LabgateError("forbidden", `field "validation": no test permission on device${refused.length > 1 ? "s" : ""} ${refused.join(", ")}`);
}

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

  route(
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
    async (c) => {
      const body = await jsonBody(c, DeploymentCreate);
      const identity = c.get("identity");
      authorize(db, identity, "group", body.group, "update");
      if (body.validation) checkValidation(db, identity, body.group, service);
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
        actor: actorOf(c, ctx.clock),
        identity,
      });
      return c.json(deploymentView(service, row), 201);
    },
  );

  route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments",
      tag,
      access: "management",
      summary: "Deployments of the groups the caller may read, newest first (X-Total-Count)",
      query: DeploymentListQuery,
      responses: { 200: { ...ok(z.array(Deployment), "OK"), headers: TOTAL }, 400: e400, 401: e401 },
    },
    mgmt,
    (c) => {
      const query = queryOf(c, DeploymentListQuery);
      const { rows, total } = listDeployments(
        db,
        { group: query.group, status: query.status, version: query.version, limit: query.limit ?? 50, offset: query.offset ?? 0 },
        permissionFilter(c.get("identity"), "group", "g"),
      );
      c.header("X-Total-Count", String(total));
      return c.json(rows.map((row) => deploymentView(service, row)));
    },
  );

  route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/:id{[0-9]+}",
      tag,
      access: "management",
      summary: "One deployment with its counts per state and per phase",
      responses: { 200: ok(Deployment, "OK"), ...onObject },
    },
    mgmt,
    (c) => c.json(deploymentView(service, deploymentFor(c, "read"))),
  );

  route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/preflight",
      tag,
      access: "management",
      summary: "What a deployment of a version to a group would run into (devices that require signatures and would refuse its packages), before it is made",
      query: DeploymentPreflightQuery,
      responses: { 200: ok(DeploymentPreflight, "OK"), 400: e400, ...onObject },
    },
    mgmt,
    (c) => {
      const query = queryOf(c, DeploymentPreflightQuery);
      if (query.group === undefined || query.version === undefined) throw new LabgateError("invalid", 'query parameters "group" and "version" are required');
      authorize(db, c.get("identity"), "group", query.group, "read");
      const extra = query.packages ? query.packages.split(",").map(Number) : [];
      const keys = packageKeys(ctx.config.prefix);
      const packages = packagesOfVersion(db, query.group, query.version, extra).map((row) => ({ ...row, metadata: JSON.parse(row.metadata) as Record<string, unknown> }));
      const answer: DeploymentPreflight = { warnings: signatureWarnings(keys, packages, signatureRequirements(db, query.group, ctx.config.prefix)) };
      return c.json(answer);
    },
  );

  route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/:id{[0-9]+}/devices",
      tag,
      access: "management",
      summary: "A deployment's devices in their recorded order, with states and failure reasons (X-Total-Count)",
      query: DeploymentDevicesQuery,
      responses: { 200: { ...ok(z.array(DeploymentDevice), "OK"), headers: TOTAL }, 400: e400, ...onObject },
    },
    mgmt,
    (c) => {
      const row = deploymentFor(c, "read");
      const query = queryOf(c, DeploymentDevicesQuery);
      const { rows, total } = listMembers(db, row.id, { state: query.state, phase: query.phase, limit: query.limit ?? 100, offset: query.offset ?? 0 });
      c.header("X-Total-Count", String(total));
      return c.json(rows.map(memberView));
    },
  );

  const command = (action: (id: number, actor: Actor) => Promise<void>) => async (c: Context<AppEnv>) => {
    const row = deploymentFor(c, "update");
    await action(row.id, actorOf(c, ctx.clock));
    return c.json(deploymentView(service, getDeployment(db, row.id)!));
  };
  const commandOp = (summary: string) => ({ tag, access: "management", summary, responses: { 200: ok(Deployment, "OK"), ...write } }) as const;
  route(app, { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/pause", ...commandOp("No new offers until resumed") }, mgmt, command((id, actor) => service.pause(id, actor)));
  route(app, { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/resume", ...commandOp("Offers again") }, mgmt, command((id, actor) => service.resume(id, actor)));
  route(
    app,
    { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/abort", ...commandOp("No more offers; downloads are told to stop; the group's policy stays") },
    mgmt,
    command((id, actor) => service.abort(id, actor)),
  );
  route(
    app,
    { method: "post", path: "/api/v2/deployments/:id{[0-9]+}/advance", ...commandOp("Start the next phase now, whatever its gate says") },
    mgmt,
    command((id, actor) => service.advance(id, actor)),
  );

  route(
    app,
    {
      method: "post",
      path: "/api/v2/deployments/:id{[0-9]+}/retry",
      tag,
      access: "management",
      summary: "Failed devices (all, or those listed) get their retries again; a completed deployment reopens (update on the group)",
      body: { json: DeploymentRetry },
      responses: { 200: ok(Deployment, "OK"), ...write },
    },
    mgmt,
    async (c) => {
      // No body: every failed device.
      const body = c.req.header("content-type") === undefined && Number(c.req.header("content-length") ?? 0) === 0 ? {} : await jsonBody(c, DeploymentRetry);
      const row = deploymentFor(c, "update");
      await service.retry(row.id, actorOf(c, ctx.clock), body.devices);
      return c.json(deploymentView(service, getDeployment(db, row.id)!));
    },
  );

  route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/update-history",
      tag: "updates",
      access: "management",
      summary: "A device's update history, newest first (X-Total-Count)",
      query: HistoryQuery,
      responses: { 200: { ...ok(z.array(UpdateHistoryEntry), "OK"), headers: TOTAL }, 400: e400, ...onObject },
    },
    mgmt,
    (c) => {
      const id = pathId(c.req.param("id"), "device");
      authorize(db, c.get("identity"), "device", id, "read");
      if (!getDevice(db, id)) throw new LabgateError("not_found", "device does not exist");
      const query = queryOf(c, HistoryQuery);
      const { rows, total } = listHistory(db, id, query.limit ?? 100, query.offset ?? 0);
      c.header("X-Total-Count", String(total));
      return c.json(rows.map(historyView));
    },
  );

  return app;
}
