/*
 * The HTTP API as types: every operation the console calls, taken from the routers that register
 * them (`route` returns each operation, `routes` keeps them in the router's type, `Routes`). The console's
 * client (src/console/app/api.ts) is typed by method and path from this union; it imports it as
 * a type only, so no server code reaches the console's bundle.
 */
import type { accountsRoutes } from "../accounts/routes.ts";
import type { auditRoutes } from "../audit/routes.ts";
import type { clusterRoutes } from "../cluster/routes.ts";
import type { systemRoutes } from "../http/system.ts";
import type { labRoutes } from "../lab/routes.ts";
import type { configRoutes } from "../testrun/routes/configs.ts";
import type { deviceRunRoutes } from "../testrun/routes/devices.ts";
import type { nodeRoutes } from "../testrun/routes/nodes.ts";
import type { RunRoutesA } from "../testrun/routes/runs.ts";
import type { actionsRoutes } from "../update/actions/routes.ts";
import type { deviceFilesRoutes } from "../update/devicefiles/routes.ts";
import type { deploymentRoutes } from "../update/deployments/routes.ts";
import type { devicesRoutes } from "../update/devices/routes.ts";
import type { groupsV2Routes } from "../update/groups/routes.ts";
import type { packagesRoutes } from "../update/packages/routes.ts";
import type { permissionsRoutes } from "../update/permissions/routes.ts";
import type { progressRoutes } from "../update/progress/routes.ts";
import type { authRoutes } from "../update/registration/routes.ts";
import type { ddiTargetRoutes } from "../update/ddi/routes.ts";

type OperationsOf<R> = R extends { readonly operations?: infer O } ? NonNullable<O> : never;
type Routers =
  | ReturnType<
      | typeof systemRoutes
      | typeof accountsRoutes
      | typeof authRoutes
      | typeof devicesRoutes
      | typeof permissionsRoutes
      | typeof packagesRoutes
      | typeof groupsV2Routes
      | typeof deploymentRoutes
      | typeof progressRoutes
      | typeof actionsRoutes
      | typeof deviceFilesRoutes
      | typeof labRoutes
      | typeof configRoutes
      | typeof deviceRunRoutes
      | typeof nodeRoutes
      | typeof auditRoutes
      | typeof clusterRoutes
      | typeof ddiTargetRoutes
    >
  | RunRoutesA;

/** Every operation of the registry, by its method and Hono path (`/api/v2/devices/:id{[0-9]+}`). */
export type Api = OperationsOf<Routers>;
