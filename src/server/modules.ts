import { accountsRoutes } from "../accounts/routes.ts";
import { backupRoutes } from "../backup/routes.ts";
import { consoleRoutes } from "../console/routes.ts";
import type { RouteModule } from "../http/app.ts";
import { testRunRoutes } from "../testrun/routes/index.ts";
import { updateServerRoutes } from "../update/routes.ts";
import { openApiRoutes } from "./openapi.ts";

/** The domains served by the appliance, in mount order. */
export const routeModules: RouteModule[] = [accountsRoutes, updateServerRoutes, testRunRoutes, backupRoutes, openApiRoutes, consoleRoutes];
