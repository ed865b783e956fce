/*
 * The route table: every router of the appliance, in mount order, with the paths it serves. All
 * are mounted at the root and write their paths out whole, so `grep -rn '"/api/v1/users"' src`
 * finds the handler; docs/routes.md lists every route with its access and file
 * (test/foundation/routes-doc.test.ts keeps it current). Routers only parse, authorize and call
 * the services the composition roots built (src/server/start.ts, startDomains).
 */
import { Hono } from "hono";
import { cors } from "hono/cors";
import { CORS_PATHS } from "../auth/middleware.ts";
import type { AccountsDomain } from "../accounts/domain.ts";
import { accountsRoutes } from "../accounts/routes.ts";
import { auditRoutes } from "../audit/routes.ts";
import { targetNames } from "../update/names.ts";
import { backupRoutes } from "../backup/routes.ts";
import { clusterRoutes } from "../cluster/routes.ts";
import { consoleRoutes } from "../console/routes.ts";
import type { RouteModule } from "../http/app.ts";
import { localStorageRoutes } from "../storage/routes.ts";
import type { TestRunDomain } from "../testrun/domain.ts";
import { testRunAccess } from "../testrun/routes/access.ts";
import { configRoutes } from "../testrun/routes/configs.ts";
import { deviceRunRoutes } from "../testrun/routes/devices.ts";
import { nodeRoutes } from "../testrun/routes/nodes.ts";
import { runRoutes } from "../testrun/routes/runs.ts";
import { actionsRoutes } from "../update/actions/routes.ts";
import { channelRoutes } from "../update/channel/routes.ts";
import { deviceFilesRoutes } from "../update/devicefiles/routes.ts";
import { deploymentRoutes } from "../update/deployments/routes.ts";
import { devicesRoutes } from "../update/devices/routes.ts";
import type { UpdateDomain } from "../update/domain.ts";
import { eventsRoutes } from "../update/events/routes.ts";
import { groupsV1Routes, groupsV2Routes } from "../update/groups/routes.ts";
import { logsRoutes } from "../update/logs/routes.ts";
import { packagesRoutes } from "../update/packages/routes.ts";
import { permissionsRoutes } from "../update/permissions/routes.ts";
import { progressRoutes } from "../update/progress/routes.ts";
import { authRoutes } from "../update/registration/routes.ts";
import { updateCheckRoutes } from "../update/updatecheck/routes.ts";
import { menderRoutes } from "../update/mender/routes.ts";
import { ddiRoutes, ddiTargetRoutes } from "../update/ddi/routes.ts";
import { DdiTargets } from "../update/ddi/service.ts";
import type { AppEnv } from "../app/context.ts";
import type { LabDomain } from "../lab/domain.ts";
import { labRoutes } from "../lab/routes.ts";
import type { Operation } from "../http/openapi.ts";
import { openApiRoutes } from "./openapi.ts";
import type { SharedServices } from "./shared.ts";

/** What the composition roots built, handed to the routers. */
export interface Domains {
  shared: SharedServices;
  accounts: AccountsDomain;
  update: UpdateDomain;
  testRun: TestRunDomain;
  lab: LabDomain;
}

/**
 * Every router, in mount order (createApp mounts `/api/health` and `/api/whoami`, src/http/system.ts,
 * before these). Each checks its own authorization.
 */
export function routeTable({ shared, accounts, update, testRun, lab }: Domains, operations: readonly Operation[]): RouteModule[] {
  return [
    // Console sign-in and accounts: /api/v1/auth/login, /api/v1/auth/logout, /api/v1/tokens/revoke, /api/v1/users
    (ctx, auth) => accountsRoutes(ctx, auth, accounts.throttle, shared.accessWatch),

    // The update server.
    // Device authorization and registrations: /api/v1/auth/device, /api/v1/auth/register, /api/v1/auth/pending
    (ctx, auth) => authRoutes(ctx, auth, update.replay, update.deviceHooks),
    // Devices and tags: /api/v1/devices, /api/v2/devices, /api/v2/tags
    (ctx, auth) => devicesRoutes(ctx, auth, update.deviceHooks, update.hub),
    // /api/v1/permissions
    (ctx, auth) => permissionsRoutes(ctx, auth),
    // /api/v1/packages
    (ctx, auth) => packagesRoutes(ctx, auth, update.storage),
    // Package downloads through signed links: /local_storage/*
    (ctx) => localStorageRoutes(ctx, update.storage),
    // /api/v2/groups, then /api/v1/groups
    (ctx, auth) => groupsV2Routes(ctx, auth, update.catalog),
    (ctx, auth) => groupsV1Routes(ctx, auth, update.catalog),
    // /api/v1/update/check
    (ctx, auth) => updateCheckRoutes(ctx, auth, update.progress, update.catalog, update.deployments),
    // Mender's device API for mender-client: /api/devices/v1/authentication, /api/devices/v1/inventory, /api/devices/v{1,2}/deployments
    (ctx, auth) => menderRoutes(ctx, auth, update.deployments, update.progress, update.catalog),
    // hawkBit's DDI API for SWUpdate and RAUC: /{tenant}/controller/v1/{controllerId}, and its targets: /api/v1/ddi/targets
    (ctx) => ddiRoutes(ctx, new DdiTargets(ctx, update)),
    (ctx, auth) => ddiTargetRoutes(ctx, auth, new DdiTargets(ctx, update)),
    // Deployments and update history: /api/v2/deployments, /api/v2/devices/:id/update-history
    (ctx, auth) => deploymentRoutes(ctx, auth, update.deployments),
    // /api/v2/devices/progress, /api/v2/devices/:id/progress
    (ctx, auth) => progressRoutes(ctx, auth, update.progress),
    // WebSockets (src/server/upgrade.ts lists them): /api/v1/devices/ws, /api/v1/devices/:mac/shell[/attach/:uuid]
    (ctx, auth) => channelRoutes(ctx, auth, update.hub, update.shells, shared.accessWatch),
    // Remote actions: /api/v2/devices/:mac/action/*
    (ctx, auth) => actionsRoutes(ctx, auth, update.actions),
    // File download from devices: /api/v2/devices/:id/fs/file, /local_storage_multipart/*
    (ctx, auth) => deviceFilesRoutes(ctx, auth, update.transfers, update.deviceFiles),
    // Live device events (SSE): /api/stream
    (ctx, auth) => eventsRoutes(ctx, auth, update.events, shared.streams, shared.accessWatch),
    // Device logs: /api/v1/logs
    (ctx, auth) => logsRoutes(ctx, auth),
    // The board lab: /api/v2/devices/:id/power
    (ctx, auth) => labRoutes(ctx, auth, lab, shared.accessWatch),

    // The test-run server; `test_server.auth: none` opens these.
    // CORS for the paths below, only when test_server.cors_origins lists origins.
    (ctx) => testRunCors(ctx.config.test_server.cors_origins),
    // /api/v1/configs
    (ctx, auth) => configRoutes(ctx, testRunAccess(ctx, auth), testRun.configs, testRun.views),
    // /api/v1/test-runs (Variant A, or B with test_server.api_variant: B)
    (ctx, auth) => runRoutes(ctx, testRunAccess(ctx, auth), { service: testRun.runs, changes: testRun.changes, streams: shared.streams, accessWatch: shared.accessWatch }),
    // Runs on managed devices: the agents' artifact uploads, /api/v1/configs/:name/history (Variant A)
    (ctx, auth) => deviceRunRoutes(ctx, auth, testRunAccess(ctx, auth), testRun.runs),
    // /api/v1/test-nodes (Variant A only, like suites and hints)
    (ctx, auth) => (ctx.config.test_server.api_variant === "A" ? nodeRoutes(ctx, testRunAccess(ctx, auth)) : new Hono<AppEnv>()),

    // GET /api/v1/cluster
    (ctx, auth) => clusterRoutes(ctx, auth, () => update.hub.size),
    // POST /api/v1/backup
    (ctx, auth) => backupRoutes(ctx, auth),
    // GET /api/v1/audit
    (ctx, auth) => auditRoutes(ctx, auth, (targets) => targetNames(ctx.store.query, ctx.config.prefix, targets)),
    // GET /api/openapi.json
    (ctx) => openApiRoutes(ctx, operations),
    // The web console: / and /console/*
    (ctx, auth) => consoleRoutes(ctx, auth),
  ];
}

/** No CORS unless origins are listed: a config upload is shell access. */
function testRunCors(origins: string[]): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  if (origins.length === 0) return app;
  const handler = cors({
    origin: origins.includes("*") ? "*" : origins,
    allowMethods: ["GET", "HEAD", "POST", "DELETE"],
    allowHeaders: ["Authorization", "Content-Type"],
    exposeHeaders: ["Content-Disposition", "X-Trigger-Id", "Location"],
    maxAge: 600,
  });
  for (const path of CORS_PATHS) app.use(path, handler).use(`${path}/*`, handler);
  return app;
}
