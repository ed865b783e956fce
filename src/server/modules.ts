import type { RouteModule } from "../http/app.ts";

/** The domains served by the appliance, in mount order. */
export const routeModules: RouteModule[] = [];
