/**
 * Lab node routes (Variant A): the configured nodes, their state checked now, and read access to
 * their runs through this gateway, which holds their tokens (the console shows a multi-node
 * trigger's runs side by side). docs/test-run-server.md, "Lab nodes".
 */
import { Hono, type Context } from "hono";
import * as z from "zod";
import { errors, ok, route, routes, type JsonReply, type Reply } from "../../http/openapi.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { nodeNamed, nodeStatuses, relayFromNode, type RelayedAnswer } from "../runs/nodes.ts";
import type { TestRunAccess } from "./access.ts";
import { Artifact, NodeStatus, previewQuery, reportQuery, TestNode, TestRun } from "../schema.ts";

/** The query parameters passed on to the node (the report's format, the artifact's preview). */
const RELAYED_QUERY = ["format", "preview"];

/** The file name of an artifact path (its last segment, percent-decoded once more as the node decodes it). */
function artifactBasename(path: string): string {
  const last = path.slice(path.lastIndexOf("/") + 1);
  try {
    return decodeURIComponent(last).split("/").pop() || "artifact";
  } catch {
    return last || "artifact";
  }
}

export function nodeRoutes(ctx: AppContext, access: TestRunAccess) {
  const app = new Hono<AppEnv>();
  const { doc, replies } = access;

  const getTestNodes = route(app, { method: "get", path: "/api/v1/test-nodes", ...doc, summary: "Configured lab nodes", responses: replies({ 200: ok(z.array(TestNode), "OK") }) }, access.read, (c) => {
    const nodes: TestNode[] = Object.entries(ctx.config.test_server.nodes).map(([name, node]) => ({ name, url: node.url }));
    return c.json(nodes);
  });

  const getTestNodesStatus = route(
    app,
    { method: "get", path: "/api/v1/test-nodes/status", ...doc, summary: "This gateway and the lab nodes, each checked now (reachable, version)", responses: replies({ 200: ok(z.array(NodeStatus), "OK") }) },
    access.read,
    async (c) => c.json(await nodeStatuses(ctx)),
  );

  /** Relays the rest of the path after `/test-nodes/{node}` (already matched to a run route) to the node, answered as `expected` says. */
  const relay = (expected: (c: Context<AppEnv>) => RelayedAnswer) => (c: Context<AppEnv>) => {
    const name = c.req.param("node") ?? "";
    const node = nodeNamed(ctx, name);
    const prefix = `/api/v1/test-nodes/${encodeURIComponent(name)}`;
    const raw = new URL(c.req.url).pathname;
    const rest = raw.startsWith(prefix) ? raw.slice(prefix.length) : raw.slice(raw.indexOf("/test-runs/"));
    const params = new URLSearchParams();
    for (const key of RELAYED_QUERY) {
      const value = c.req.query(key);
      if (value !== undefined) params.set(key, value);
    }
    const query = params.size > 0 ? `?${params}` : "";
    return relayFromNode(ctx.clock, name, node, c.req.method === "HEAD" ? "HEAD" : "GET", `/api/v1${rest}${query}`, expected(c));
  };
  // A node's JSON is relayed as the node answers it, unread: the node's own routes check its shape.
  const json = (c: Context<AppEnv>) => relay(() => ({ kind: "json" }))(c) as Promise<JsonReply<200, never>>;
  const relayed: Record<number, Reply> = { 404: errors[404], 502: { description: "The node cannot be reached, refused the gateway's token, or failed", json: errors[404].json } };
  const getTestNodesByNodeTestRunsById = route(
    app,
    { method: "get", path: "/api/v1/test-nodes/:node/test-runs/:id", ...doc, summary: "A run on a lab node, read through this gateway", responses: replies({ 200: ok(TestRun, "As the node answers it"), ...relayed }) },
    access.read,
    json,
  );
  const getTestNodesByNodeTestRunsByIdReport = route(
    app,
    {
      method: "get",
      path: "/api/v1/test-nodes/:node/test-runs/:id/report",
      ...doc,
      summary: "Its report (?format=json as the node serves it)",
      query: reportQuery.pick({ format: true }),
      responses: replies({ 200: { description: "The CSV report, or the JSON form", media: "text/csv" }, ...relayed }),
    },
    access.read,
    relay((c) => (c.req.query("format") === "json" ? { kind: "json" } : { kind: "csv", filename: `${c.req.param("id")}.csv` })),
  );
  const getTestNodesByNodeTestRunsByIdArtifacts = route(
    app,
    { method: "get", path: "/api/v1/test-nodes/:node/test-runs/:id/artifacts", ...doc, summary: "Its artifact files", responses: replies({ 200: ok(z.array(Artifact), "OK"), ...relayed }) },
    access.read,
    json,
  );
  const getTestNodesByNodeTestRunsByIdArtifactsPath = route(
    app,
    {
      method: "get",
      path: "/api/v1/test-nodes/:node/test-runs/:id/artifacts/*",
      ...doc,
      summary: "One of its artifacts (?preview=true: inline)",
      query: previewQuery,
      responses: replies({ 200: { description: "The file", media: "application/octet-stream" }, ...relayed }),
    },
    access.read,
    relay((c) => ({ kind: "file", filename: artifactBasename(c.req.path), preview: c.req.query("preview") === "true" })),
  );

  return routes(app, getTestNodes, getTestNodesStatus, getTestNodesByNodeTestRunsById, getTestNodesByNodeTestRunsByIdReport, getTestNodesByNodeTestRunsByIdArtifacts, getTestNodesByNodeTestRunsByIdArtifactsPath);
}
