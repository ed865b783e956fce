import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { Agent as Dispatcher, fetch as undiciFetch } from "undici";
import type { ClientOptions } from "ws";
import { ConfigError } from "../config/schema.ts";

/** How the agent reaches the gateway: HTTP requests and the options of its WebSockets. */
export interface ServerTransport {
  fetch: typeof fetch;
  ws: Pick<ClientOptions, "ca">;
}

/**
 * Without `caFile`, the system's trust store (and plain HTTP). With it, only the certificates in
 * that PEM file are trusted: a gateway with a self-signed certificate or a lab CA, and nobody else.
 */
export function serverTransport(caFile: string): ServerTransport {
  if (!caFile) return { fetch: (input, init) => fetch(input, init), ws: {} };
  let ca: Buffer;
  try {
    ca = readFileSync(caFile);
    new X509Certificate(ca);
  } catch (error) {
    throw new ConfigError(`agent config key ca_file: ${caFile} is not a readable PEM certificate (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  // Node's built-in fetch takes no trust options: undici's own fetch with a dispatcher of its own does.
  const dispatcher = new Dispatcher({ connect: { ca } });
  const pinned = (input: Parameters<typeof fetch>[0], init?: RequestInit) =>
    undiciFetch(input as Parameters<typeof undiciFetch>[0], { ...(init as Parameters<typeof undiciFetch>[1]), dispatcher }) as unknown as Promise<Response>;
  return { fetch: pinned, ws: { ca } };
}
