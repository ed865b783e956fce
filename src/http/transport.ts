import { ServerResponse, type IncomingMessage } from "node:http";
import type { TLSSocket } from "node:tls";
import type { Context } from "hono";

/**
 * Whether the request came over TLS (e.g. for a cookie's `Secure`). Asks the socket, not the
 * URL: an absolute-form request target (`GET https://host/ HTTP/1.1`) could claim https over
 * plain HTTP.
 */
export function isTls(c: Context): boolean {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return (incoming?.socket as TLSSocket | undefined)?.encrypted === true;
}

/** The Node response under a request served by @hono/node-server, when there is one. */
export function nodeResponse(env: unknown): ServerResponse | undefined {
  const outgoing = (env as { outgoing?: unknown } | undefined)?.outgoing;
  return outgoing instanceof ServerResponse ? outgoing : undefined;
}

/** The peer address of the request's connection ("" when unknown, e.g. app.request in a test). */
export function clientAddress(c: Context): string {
  return (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket?.remoteAddress ?? "";
}
