import type { NodeTarget } from "../../config/config.ts";

const REQUEST_TIMEOUT_MS = 10_000;

/** One request to another test node (the protoplaster node protocol), with its token when configured. */
export function nodeFetch(node: NodeTarget, method: string, path: string, options: { body?: unknown; signal?: AbortSignal; timeoutMs?: number } = {}): Promise<Response> {
  const headers: Record<string, string> = {};
  if (node.token) headers.authorization = `Bearer token=${node.token}`;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const timeout = AbortSignal.timeout(options.timeoutMs ?? REQUEST_TIMEOUT_MS);
  return fetch(`${node.url}${path}`, {
    method,
    headers,
    ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
    signal: options.signal ? AbortSignal.any([options.signal, timeout]) : timeout,
  });
}

/** A request whose answer is read as JSON (undefined when it is not JSON). */
export async function nodeJson(node: NodeTarget, method: string, path: string, options: { body?: unknown; signal?: AbortSignal } = {}): Promise<{ status: number; json: unknown }> {
  const response = await nodeFetch(node, method, path, options);
  const text = await response.text();
  try {
    return { status: response.status, json: text ? JSON.parse(text) : undefined };
  } catch {
    return { status: response.status, json: undefined };
  }
}
