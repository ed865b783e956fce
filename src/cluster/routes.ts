import { Hono } from "hono";
import type { AppContext, AppEnv } from "../app/context.ts";
import type { Auth } from "../auth/middleware.ts";
import { errors, route, routes } from "../http/openapi.ts";
import { ClusterView } from "./schema.ts";

/** `GET /api/v1/cluster`: the nodes, their state, their devices and jobs (admin_ro). */
export function clusterRoutes(ctx: AppContext, auth: Auth, localDevices: () => number) {
  const app = new Hono<AppEnv>();
  const getCluster = route(
    app,
    {
      method: "get",
      path: "/api/v1/cluster",
      tag: "cluster",
      access: "management",
      summary: "The nodes of the cluster: state, connected devices, the jobs each runs (admin_ro; one node on the embedded database)",
      responses: { 200: { description: "By name", json: ClusterView }, 401: errors[401], 403: errors[403] },
    },
    auth.management("admin_ro"),
    async (c) => c.json({ nodes: await ctx.cluster.nodes(localDevices()) }),
  );
  return routes(app, getCluster);
}
