import { Hono } from "hono";
import type { AppContext, AppEnv } from "../app/context.ts";
import { readKeyFiles } from "../auth/keys.ts";
import type { Auth } from "../auth/middleware.ts";
import { recordRequest } from "../http/actor.ts";
import { errors, route, routes } from "../http/openapi.ts";
import { LabgateError } from "../util/errors.ts";
import { ClusterKeys, ClusterView } from "./schema.ts";

/** `GET /api/v1/cluster`: the nodes, their state, their devices and jobs (admin_ro); `POST /api/v1/cluster/join`: the keys a new node takes (admin_rw). */
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
  const join = route(
    app,
    {
      method: "post",
      path: "/api/v1/cluster/join",
      tag: "cluster",
      access: "management",
      summary:
        "The signing key and the link secret, for a new node of the cluster before its first start (admin_rw; labgate cluster join calls it; audited). Only a node on PostgreSQL answers",
      responses: {
        200: { description: "The files of the data dir's keys/, as they are on disk", json: ClusterKeys },
        401: errors[401],
        403: errors[403],
        404: { description: "This server is on the embedded database: it has no cluster to join", json: errors[404].json },
      },
    },
    auth.management("admin_rw"),
    async (c) => {
      if (!ctx.config.database.url) throw new LabgateError("not_found", "this server keeps its database in its data dir (no database.url): there is no cluster to join; nodes share one PostgreSQL database");
      // In the log before the keys leave: a copy is never unrecorded.
      await recordRequest(ctx, c, "cluster.join", "keys");
      c.header("Cache-Control", "no-store");
      return c.json({ files: readKeyFiles(ctx.dataDir) });
    },
  );
  return routes(app, getCluster, join);
}
