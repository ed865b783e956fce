import type { NodeTarget } from "../../config/config.ts";
import { deadline, type Clock } from "../../util/time.ts";

const REQUEST_TIMEOUT_MS = 10_000;

/** What a request to a node may carry: a JSON body or a FormData (multipart), the caller's abort, a limit other than REQUEST_TIMEOUT_MS. */
export interface NodeRequestOptions {
  body?: unknown;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/**
 * One exchange with another test node (the protoplaster node protocol), with its token when
 * configured: the request, then `read` of its answer. The deadline (on `clock`) covers both.
 */
export async function nodeExchange<T>(clock: Clock, node: NodeTarget, method: string, path: string, options: NodeRequestOptions, read: (response: Response) => Promise<T>): Promise<T> {
  const headers: Record<string, string> = {};
  if (node.token) headers.authorization = `Bearer token=${node.token}`;
  const form = options.body instanceof FormData ? options.body : undefined;
  if (options.body !== undefined && !form) headers["content-type"] = "application/json";
  const timeout = deadline(clock, options.timeoutMs ?? REQUEST_TIMEOUT_MS);
  try {
    const response = await fetch(`${node.url}${path}`, {
      method,
      headers,
      ...(options.body !== undefined ? { body: form ?? JSON.stringify(options.body) } : {}),
      signal: options.signal ? AbortSignal.any([options.signal, timeout.signal]) : timeout.signal,
    });
    return await read(response);
  } finally {
    timeout.cancel();
  }
}

/**
 * A GET whose answer may be streamed for as long as it takes: only the wait for the response
 * headers is limited (a large artifact must not be cut off by the request timeout).
 */
export async function nodeStream(clock: Clock, node: NodeTarget, method: "GET" | "HEAD", path: string): Promise<Response> {
  const timeout = deadline(clock, REQUEST_TIMEOUT_MS);
  try {
    const headers: Record<string, string> = node.token ? { authorization: `Bearer token=${node.token}` } : {};
    return await fetch(`${node.url}${path}`, { method, headers, signal: timeout.signal });
  } finally {
    timeout.cancel();
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
export function nodeJson(clock: Clock, node: NodeTarget, method: string, path: string, options: NodeRequestOptions = {}): Promise<{ status: number; json: unknown }> {
  return nodeExchange(clock, node, method, path, options, async (response) => {
    const text = await readLimited(response, NODE_ANSWER_LIMIT);
    try {
      return { status: response.status, json: text ? JSON.parse(text) : undefined };
    } catch {
      return { status: response.status, json: undefined };
    }
  });
}
