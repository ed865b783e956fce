import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import type { ClientOptions } from "ws";
import { ConfigError } from "../util/config-error.ts";
import { httpClient, httpRequest, type HttpClient } from "../update/client/http.ts";

/** How the agent reaches the gateway: HTTP requests and the options of its WebSockets. */
export interface ServerTransport {
  http: HttpClient;
  ws: Pick<ClientOptions, "ca">;
}

/**
 * Without `caFile`, the system's trust store (and plain HTTP). With it, only the certificates in
 * that PEM file are trusted: a gateway with a self-signed certificate or a lab CA, and nobody else.
 */
export function serverTransport(caFile: string): ServerTransport {
  if (!caFile) return { http: httpRequest, ws: {} };
  let ca: Buffer;
  try {
    ca = readFileSync(caFile);
    new X509Certificate(ca);
  } catch (error) {
    throw new ConfigError(`agent config key ca_file: ${caFile} is not a readable PEM certificate (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  return { http: httpClient({ ca }), ws: { ca } };
}
