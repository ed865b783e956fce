/*
 * Requests from one node to another (at the other's advertise_url, with this node's own token):
 * the other node's answer, or its refusal as the LabgateError it threw there.
 */
import { LabgateError, type ErrorCode } from "../util/errors.ts";
import type { Cluster, PeerNode } from "./cluster.ts";

/** The statuses a node answers and the error each stands for (src/http/errors.ts maps them the other way). */
const CODE_OF: Record<number, ErrorCode> = {
  400: "invalid",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  413: "too_large",
  416: "bad_range",
  422: "unprocessable",
  429: "too_many",
  503: "unavailable",
  504: "timeout",
  507: "no_space",
};

export interface PeerRequest {
  method?: "GET" | "POST" | "PUT";
  /** A JSON body. */
  json?: unknown;
  /** A streamed body (sent as `application/octet-stream`). */
  stream?: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;
  /** Ends the wait for a node that went silent. */
  timeoutMs: number;
}

/** Calls `path` on `peer`; resolves with its JSON answer, or throws what it refused with (a node that did not answer: `upstream`). */
export async function callPeer<T>(cluster: Pick<Cluster, "peerToken">, peer: PeerNode, path: string, request: PeerRequest): Promise<T> {
  const headers: Record<string, string> = { authorization: `Bearer token=${cluster.peerToken()}` };
  let body: BodyInit | undefined;
  if (request.json !== undefined) {
    headers["content-type"] = "application/json";
    body = JSON.stringify(request.json);
  } else if (request.stream) {
    headers["content-type"] = "application/octet-stream";
    body = request.stream as BodyInit;
  }
  let res: Response;
  try {
    res = await fetch(`${peer.url}${path}`, { method: request.method ?? (body ? "POST" : "GET"), headers, body, signal: AbortSignal.timeout(request.timeoutMs), ...(request.stream ? { duplex: "half" } : {}) } as RequestInit);
  } catch (error) {
    throw new LabgateError("upstream", `node ${peer.name}, which holds the device's socket, did not answer: ${(error as Error).message}`);
  }
  const answer = (await res.json().catch(() => undefined)) as (T & { error?: unknown }) | undefined;
  if (res.status === 200) return answer as T;
  const message = typeof answer?.error === "string" ? answer.error : `node ${peer.name} answered ${res.status}`;
  const details = answer && typeof answer === "object" ? Object.fromEntries(Object.entries(answer).filter(([key, value]) => key !== "error" && (typeof value === "number" || typeof value === "string"))) : undefined;
  throw new LabgateError(CODE_OF[res.status] ?? "upstream", message, details && Object.keys(details).length > 0 ? (details as Record<string, string | number>) : undefined);
}
