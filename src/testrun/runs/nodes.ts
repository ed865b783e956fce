/**
 * The lab nodes as the console's Nodes page shows them: this gateway ("Local device") and
 * every configured node (`test_server.nodes`, `nodes_file`), each checked now.
 */
import type { AppContext } from "../../app/context.ts";
import type { NodeTarget } from "../../config/config.ts";
import { LabgateError } from "../../util/errors.ts";
import type { Clock } from "../../util/time.ts";
import { contentDisposition, FILE_CSP, untrustedFileHeaders } from "../../storage/send.ts";
import { nodeExchange, nodeJson, nodeStream } from "./node-client.ts";
import type { NodeStatus, PushResult } from "../schema.ts";

/** The reserved name of this gateway in node lists (the reference's web UI shows it so). */
export const LOCAL_DEVICE = "Local device";
/** How long one node may take to answer a check. */
const CHECK_TIMEOUT_MS = 3_000;

const errorOf = (error: unknown): string => {
  const e = error as Error & { cause?: { code?: string; message?: string } };
  if (e.name === "TimeoutError") return "no answer in time";
  return e.cause?.code ?? e.cause?.message ?? e.message;
};

async function check(clock: Clock, name: string, node: NodeTarget): Promise<NodeStatus> {
  const started = performance.now();
  const [configs, health] = await Promise.allSettled([
    nodeJson(clock, node, "GET", "/api/v1/configs", { timeoutMs: CHECK_TIMEOUT_MS }),
    nodeJson(clock, node, "GET", "/api/health", { timeoutMs: CHECK_TIMEOUT_MS }),
  ]);
  const ms = Math.round(performance.now() - started);
  const version = health.status === "fulfilled" && typeof (health.value.json as { version?: unknown } | undefined)?.version === "string" ? (health.value.json as { version: string }).version : "";
  const base = { name, url: node.url, local: false, version };
  if (configs.status === "rejected") return { ...base, reachable: false, error: errorOf(configs.reason), latency_ms: null };
  const { status, json } = configs.value;
  if (status === 200) return { ...base, reachable: true, error: "", latency_ms: ms };
  const message = json && typeof json === "object" && "error" in json ? `: ${String((json as { error: unknown }).error)}` : "";
  return { ...base, reachable: false, error: `HTTP ${status}${message}`, latency_ms: ms };
}

/** This gateway first, then the configured nodes in configuration order, all checked in parallel. */
export async function nodeStatuses(ctx: Pick<AppContext, "clock" | "config" | "version">): Promise<NodeStatus[]> {
  const local: NodeStatus = { name: LOCAL_DEVICE, url: "", local: true, reachable: true, version: ctx.version, error: "", latency_ms: 0 };
  const remote = await Promise.all(Object.entries(ctx.config.test_server.nodes).map(([name, node]) => check(ctx.clock, name, node)));
  return [local, ...remote];
}

/** A configured node by name, or a 404 (LOCAL_DEVICE is this gateway, not a node to call). */
export function nodeNamed(ctx: Pick<AppContext, "config" | "version">, name: string): NodeTarget {
  const nodes = ctx.config.test_server.nodes;
  if (!Object.hasOwn(nodes, name)) throw new LabgateError("not_found", `unknown node '${name}'`);
  return nodes[name];
}

/** An error text from a node's answer: its `error` field, else the start of its body. */
async function answerText(response: Response): Promise<string> {
  const text = (await response.text().catch(() => "")).slice(0, 2000);
  try {
    const json = JSON.parse(text) as { error?: unknown };
    if (json && typeof json.error === "string") return json.error;
  } catch {
    // not JSON
  }
  return text.trim().slice(0, 200) || `HTTP ${response.status}`;
}

/**
 * What the gateway expects a relayed answer to be. A node is another machine: its bytes are
 * untrusted, so its own Content-Type and Content-Disposition are never passed on. JSON and CSV
 * go out as labgate's own types (anything else from the node is a 502); a file as any untrusted
 * file (untrustedFileHeaders: a download, or a text or raster preview).
 */
export type RelayedAnswer = { kind: "json" } | { kind: "csv"; filename: string } | { kind: "file"; filename: string; preview: boolean };

const RELAYED_TYPES = {
  json: { pattern: /^application\/json\s*(?:;|$)/i, type: "application/json", what: "JSON" },
  csv: { pattern: /^text\/csv\s*(?:;|$)/i, type: "text/csv; charset=utf-8", what: "CSV" },
};

/** The head of a relayed answer the node gave as `response` (see RelayedAnswer); a 502 when it is not what was expected. */
async function relayedHead(name: string, response: Response, expected: RelayedAnswer): Promise<Record<string, string>> {
  const length = response.headers.get("content-length");
  const headers: Record<string, string> = { "content-security-policy": FILE_CSP, ...(length === null ? {} : { "content-length": length }) };
  if (expected.kind === "file") return { ...headers, ...(await untrustedFileHeaders(expected.filename, expected.preview)) };
  const { pattern, type, what } = RELAYED_TYPES[expected.kind];
  const given = response.headers.get("content-type") ?? "";
  if (!pattern.test(given)) throw new LabgateError("upstream", `node '${name}' answered ${given || "without a Content-Type"} where ${what} was expected`);
  headers["content-type"] = type;
  if (expected.kind === "csv") headers["content-disposition"] = contentDisposition("attachment", expected.filename);
  return headers;
}

/**
 * A node's own refusal (its 4xx: a run it does not have, a range it cannot serve), relayed with
 * the node's status: the one error whose status is not the gateway's to choose (LabgateError's
 * `relayedStatus`).
 */
export class NodeRefusal extends LabgateError {
  constructor(status: number, message: string) {
    super("upstream", message, undefined, status);
  }
}

/**
 * Fetches `path` of a node's test-run API for the caller (read-only: runs, reports, artifacts)
 * and streams the answer through as `expected` says (see RelayedAnswer). Errors become JSON: the node's 4xx as they are (the ones
 * labgate answers), except that a refusal of the gateway's own token, the node's 5xx
 * and any other status are 502, like a node that cannot be reached: the caller's session is
 * fine, the node is the problem.
 */
export async function relayFromNode(clock: Clock, name: string, node: NodeTarget, method: "GET" | "HEAD", path: string, expected: RelayedAnswer): Promise<Response> {
  let response: Response;
  try {
    response = await nodeStream(clock, node, method, path);
  } catch (error) {
    throw new LabgateError("upstream", `node '${name}' unreachable: ${errorOf(error)}`);
  }
  if (!response.ok) {
    const message = `node '${name}': ${await answerText(response)}`;
    const status = response.status;
    if (status === 401 || status === 403 || status >= 500 || status < 400) throw new LabgateError("upstream", message);
    throw new NodeRefusal(status, message);
  }
  let headers: Record<string, string>;
  try {
    headers = await relayedHead(name, response, expected);
  } catch (error) {
    await response.body?.cancel().catch(() => {});
    throw error;
  }
  if (method === "HEAD") await response.body?.cancel().catch(() => {});
  return new Response(method === "HEAD" ? null : response.body, { status: 200, headers });
}

/** What pushing a config to one node did. */

/**
 * Uploads stored configs (`files`: name -> text) to each of `nodes`, as a client of their
 * `POST /api/v1/configs`; nodes in parallel, files in order. Never throws for a node's failure.
 */
export async function pushConfigs(ctx: Pick<AppContext, "clock" | "config" | "version">, files: Array<[string, string]>, nodes: string[]): Promise<PushResult[]> {
  return Promise.all(
    nodes.map(async (name): Promise<PushResult> => {
      const node = nodeNamed(ctx, name);
      const pushed: string[] = [];
      for (const [file, text] of files) {
        const form = new FormData();
        form.append("file", new Blob([text], { type: "application/yaml" }), file);
        try {
          const refused = await nodeExchange(ctx.clock, node, "POST", "/api/v1/configs", { body: form }, async (response) => {
            if (!response.ok) return `HTTP ${response.status}: ${await answerText(response)}`;
            await response.body?.cancel().catch(() => {});
          });
          if (refused) return { node: name, pushed, error: `${file}: ${refused}` };
        } catch (error) {
          return { node: name, pushed, error: `${file}: unreachable: ${errorOf(error)}` };
        }
        pushed.push(file);
      }
      return { node: name, pushed, error: "" };
    }),
  );
}
