import type { NodeTarget } from "../../config/config.ts";

const REQUEST_TIMEOUT_MS = 10_000;

/**
 * One request to another test node (the protoplaster node protocol), with its token when configured.
 * `body` is sent as JSON, a FormData as multipart. The timeout covers the whole exchange.
 */
export function nodeFetch(node: NodeTarget, method: string, path: string, options: { body?: unknown; signal?: AbortSignal; timeoutMs?: number } = {}): Promise<Response> {
  const headers: Record<string, string> = {};
  if (node.token) headers.authorization = `Bearer token=${node.token}`;
  const form = options.body instanceof FormData ? options.body : undefined;
  if (options.body !== undefined && !form) headers["content-type"] = "application/json";
  const timeout = AbortSignal.timeout(options.timeoutMs ?? REQUEST_TIMEOUT_MS);
  return fetch(`${node.url}${path}`, {
    method,
    headers,
    ...(options.body !== undefined ? { body: form ?? JSON.stringify(options.body) } : {}),
    signal: options.signal ? AbortSignal.any([options.signal, timeout]) : timeout,
  });
}

/**
 * A GET whose answer may be streamed for as long as it takes: only the wait for the response
 * headers is limited (a large artifact must not be cut off by the request timeout).
 */
export async function nodeStream(node: NodeTarget, method: "GET" | "HEAD", path: string): Promise<Response> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("no answer", "TimeoutError")), REQUEST_TIMEOUT_MS);
  try {
    const headers: Record<string, string> = node.token ? { authorization: `Bearer token=${node.token}` } : {};
    return await fetch(`${node.url}${path}`, { method, headers, signal: controller.signal });
  } finally {
    clearTimeout(timer);
  }
}

/** Largest JSON answer read from a node; a bigger (or endless) one is cut off and counts as not JSON. */
export const NODE_ANSWER_LIMIT = 16 * 1024 * 1024;

/** The body as text, or undefined once it grows past `limit` (the rest is never read). */
async function readLimited(response: Response, limit: number): Promise<string | undefined> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** A request whose answer is read as JSON (undefined when it is not JSON or too large). */
export async function nodeJson(node: NodeTarget, method: string, path: string, options: { body?: unknown; signal?: AbortSignal; timeoutMs?: number } = {}): Promise<{ status: number; json: unknown }> {
  const response = await nodeFetch(node, method, path, options);
  const text = await readLimited(response, NODE_ANSWER_LIMIT);
  try {
    return { status: response.status, json: text ? JSON.parse(text) : undefined };
  } catch {
    return { status: response.status, json: undefined };
  }
}
