import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
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
  // Node's built-in fetch takes no trust options: undici's own fetch with a dispatcher of its own
  // does. Loaded on the first request, so that an agent without ca_file never loads undici.
  let pinned: Promise<typeof fetch> | undefined;
  const load = async (): Promise<typeof fetch> => {
    const undici = await import("undici");
    const dispatcher = new undici.Agent({ connect: { ca } });
    return (input, init) =>
      undici.fetch(input as Parameters<typeof undici.fetch>[0], { ...(init as Parameters<typeof undici.fetch>[1]), dispatcher }) as unknown as Promise<Response>;
  };
  return { fetch: async (input, init) => (await (pinned ??= load()))(input, init), ws: { ca } };
}
