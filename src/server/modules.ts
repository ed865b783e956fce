import type { RouteModule } from "../http/app.ts";
import { testRunRoutes } from "../testrun/routes/index.ts";

/** The domains served by the appliance, in mount order. */
export const routeModules: RouteModule[] = [testRunRoutes];
