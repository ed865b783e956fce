/*
 * The device side's HTTP client, on node:http and node:https. Not fetch: Node's fetch (and
 * Headers, Request, Response) is its built-in undici, which an idle agent would hold only for a
 * few requests a minute (megabytes of a small board's memory). node:https, and with
 * it tls, loads with the first request to an https server. Bodies stream both ways.
 */
import { globalAgent, request as plainRequest, type IncomingHttpHeaders, type IncomingMessage } from "node:http";
import type { Agent as HttpsAgent } from "node:https";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

/** A request sends no byte and gets none for this long: the server is gone (as undici's 300 s header and body timeouts). */
const IDLE_TIMEOUT_MS = 300_000;

export interface HttpRequest {
  method?: string;
  headers?: Record<string, string>;
  /** Bytes or text go with their length; a stream goes chunked. */
  body?: string | Uint8Array | Readable;
  /** Aborts the request, and the answer's body while it is read. */
  signal?: AbortSignal;
}

export interface HttpAnswer {
  status: number;
  /** Names in lower case. */
  headers: IncomingHttpHeaders;
  /** The body as it arrives: read it, or `discard()` it (the connection is kept alive for the next request). */
  body: IncomingMessage;
  text(): Promise<string>;
  /** The body parsed as JSON; rejects when it is not. */
  json(): Promise<unknown>;
  discard(): void;
}

export type HttpClient = (url: string, request?: HttpRequest) => Promise<HttpAnswer>;

function answer(body: IncomingMessage): HttpAnswer {
  const text = async () => {
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString("utf8");
  };
  return { status: body.statusCode ?? 0, headers: body.headers, body, text, json: async () => JSON.parse(await text()) as unknown, discard: () => void body.resume() };
}

/**
 * A client that trusts, for https, only the certificates in `ca` (a lab CA or a self-signed
 * gateway), or only a server that presents exactly the certificate `pinned` (its SHA-256
 * fingerprint, as X509Certificate gives it) under any name and chain, or else the system's store.
 */
export function httpClient(options: { ca?: Buffer; pinned?: string } = {}): HttpClient {
  let httpsAgent: HttpsAgent | undefined;
  const secureAgent = (): HttpsAgent => {
    const https = process.getBuiltinModule("node:https");
    // Keep-alive as node:http's global agent does.
    if (!httpsAgent) {
      httpsAgent = options.ca || options.pinned ? new https.Agent({ keepAlive: true, scheduling: "lifo", timeout: 5000, ca: options.ca }) : https.globalAgent;
      if (options.pinned) pin(httpsAgent, options.pinned);
    }
    return httpsAgent;
  };
  return (url, request = {}) =>
    new Promise((resolve, reject) => {
      const target = new URL(url);
      const secure = target.protocol === "https:";
      const send = secure ? process.getBuiltinModule("node:https").request : plainRequest;
      const { body } = request;
      const headers = { ...request.headers };
      if (body !== undefined && !(body instanceof Readable)) headers["content-length"] = String(Buffer.byteLength(body));
      const outgoing = send(target, { method: request.method ?? "GET", headers, signal: request.signal, timeout: IDLE_TIMEOUT_MS, agent: secure ? secureAgent() : globalAgent }, (incoming) =>
        resolve(answer(incoming)),
      );
      // Also after the answer came: an error then ends its body, whose reader sees it.
      outgoing.on("error", reject);
      outgoing.on("timeout", () => outgoing.destroy(new Error(`no data from ${target.host} for ${IDLE_TIMEOUT_MS / 1000} s`)));
      // A failed pipeline destroys the request with its error (the listener above has it).
      if (body instanceof Readable) pipeline(body, outgoing).catch(() => {});
      else outgoing.end(body);
    });
}

/**
 * Hands the agent's requests a TLS socket only once its server has shown the certificate of
 * fingerprint `fingerprint256`: nothing of a request (its token) is written before.
 */
function pin(agent: HttpsAgent, fingerprint256: string): void {
  const { connect } = process.getBuiltinModule("node:tls");
  type Connect = (options: import("node:tls").ConnectionOptions, callback: (error: Error | null, socket?: import("node:stream").Duplex) => void) => undefined;
  (agent as unknown as { createConnection: Connect }).createConnection = (options, callback) => {
    const socket = connect({ ...options, rejectUnauthorized: false });
    socket.once("secureConnect", () => {
      if (socket.getPeerX509Certificate()?.fingerprint256 === fingerprint256) return callback(null, socket);
      socket.destroy();
      callback(new Error(`the server at ${options.host}:${options.port} does not present the pinned certificate`));
    });
    socket.once("error", (error) => callback(error));
    return undefined;
  };
}

/** Plain HTTP, and https with the system's trust store. */
export const httpRequest: HttpClient = httpClient();
