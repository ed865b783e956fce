/**
 * Lab node routes (Variant A): the configured nodes (14: `GET /api/v1/test-nodes`), their state
 * checked now, and read access to their runs through this gateway, which holds their tokens
 * (the console shows a multi-node trigger's runs side by side).
 */
import { Hono, type Context } from "hono";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { nodeNamed, nodeStatuses, relayFromNode, type RelayedAnswer } from "../runs/nodes.ts";
import type { TestRunAccess } from "./access.ts";

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

export function nodeRoutes(ctx: AppContext, access: TestRunAccess): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.get("/api/v1/test-nodes", access.read, (c) =>
    c.json(Object.entries(ctx.config.test_server.nodes).map(([name, node]) => ({ name, url: node.url }))),
  );

  app.get("/api/v1/test-nodes/status", access.read, async (c) => c.json(await nodeStatuses(ctx)));

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
  const json = relay(() => ({ kind: "json" }));
  app.get("/api/v1/test-nodes/:node/test-runs/:id", access.read, json);
  app.get(
    "/api/v1/test-nodes/:node/test-runs/:id/report",
    access.read,
    relay((c) => (c.req.query("format") === "json" ? { kind: "json" } : { kind: "csv", filename: `${c.req.param("id")}.csv` })),
  );
  app.get("/api/v1/test-nodes/:node/test-runs/:id/artifacts", access.read, json);
  app.get(
    "/api/v1/test-nodes/:node/test-runs/:id/artifacts/*",
    access.read,
    relay((c) => ({ kind: "file", filename: artifactBasename(c.req.path), preview: c.req.query("preview") === "true" })),
  );

  return app;
}
