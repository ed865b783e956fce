/** The Fetch standard's Request, as hono and @hono/node-server use it (src/http/web/install.ts). */
import { Body, BodyReaders, extractBody, readBody, type BodyInit } from "./body.ts";
import { Headers, TOKEN, type HeadersInit } from "./headers.ts";

export interface RequestInit {
  method?: string;
  headers?: HeadersInit;
  body?: BodyInit | null;
  signal?: AbortSignal | null;
  duplex?: "half";
  [option: string]: unknown;
}

/** Methods the standard upper-cases whatever case they come in. */
const NORMALIZED = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"]);
const FORBIDDEN = new Set(["CONNECT", "TRACE", "TRACK"]);

function requestMethod(method: string): string {
  if (!TOKEN.test(method)) throw new TypeError(`Request: '${method}' is not a valid HTTP method`);
  const upper = method.toUpperCase();
  if (FORBIDDEN.has(upper)) throw new TypeError(`Request: '${method}' HTTP method is unsupported`);
  return NORMALIZED.has(upper) ? upper : method;
}

export class Request extends BodyReaders {
  #url: string;
  #method: string;
  #headers: Headers;
  #signal: AbortSignal;
  #body: Body;

  constructor(input: string | URL | Request, init: RequestInit = {}) {
    super();
    const from = input instanceof Request ? input : undefined;
    let url: URL;
    try {
      url = new URL(from ? from.url : String(input));
    } catch {
      throw new TypeError(`Request: invalid URL ${JSON.stringify(String(input))}`);
    }
    if (url.username || url.password) throw new TypeError("Request: a URL with credentials");
    this.#url = url.href;
    this.#method = init.method !== undefined ? requestMethod(String(init.method)) : (from?.method ?? "GET");
    this.#headers = new Headers(init.headers ?? from?.headers);
    this.#signal = init.signal ?? from?.signal ?? new AbortController().signal;
    let body: Body | undefined;
    if (init.body !== undefined && init.body !== null) {
      const extracted = extractBody(init.body);
      if (extracted.type && !this.#headers.has("content-type")) this.#headers.set("content-type", extracted.type);
      body = new Body(extracted);
    } else if (from && init.body === undefined) {
      if (from.bodyUsed) throw new TypeError("Request: the request's body has already been read");
      if (#body in from) {
        body = from.#body;
        // The body moves to the new request: the old one reads as used.
        from.#body = new Body({ source: undefined, stream: emptyUsedStream(), type: undefined });
      } else {
        // A request of @hono/node-server's (its prototype is this class's): its body as a stream.
        const stream = (from as Request).body as import("node:stream/web").ReadableStream<Uint8Array> | null;
        if (stream) body = new Body({ source: undefined, stream, type: undefined });
      }
    }
    if (body && !body.isNull && (this.#method === "GET" || this.#method === "HEAD")) throw new TypeError("Request: a GET or HEAD request has no body");
    this.#body = body ?? new Body(undefined);
  }

  get url(): string {
    return this.#url;
  }
  get method(): string {
    return this.#method;
  }
  get headers(): Headers {
    return this.#headers;
  }
  get signal(): AbortSignal {
    return this.#signal;
  }
  get body(): ReadableStream<Uint8Array> | null {
    return this.#body.stream() as ReadableStream<Uint8Array> | null;
  }
  get bodyUsed(): boolean {
    return this.#body.used;
  }
  get cache(): string {
    return "default";
  }
  get credentials(): string {
    return "same-origin";
  }
  get destination(): string {
    return "";
  }
  get duplex(): string {
    return "half";
  }
  get integrity(): string {
    return "";
  }
  get keepalive(): boolean {
    return false;
  }
  get mode(): string {
    return "cors";
  }
  get redirect(): string {
    return "follow";
  }
  get referrer(): string {
    return "about:client";
  }
  get referrerPolicy(): string {
    return "";
  }

  protected readBodyAs(as: Parameters<typeof readBody>[1]): Promise<unknown> {
    return readBody(this.#body, as, this.#headers.get("content-type"));
  }

  clone(): Request {
    const copy = new Request(this.#url, { method: this.#method, headers: this.#headers, signal: this.#signal });
    copy.#body = this.#body.clone();
    return copy;
  }

  get [Symbol.toStringTag](): string {
    return "Request";
  }
}

/** A stream that reads as used (locked), for a request whose body moved to another. */
function emptyUsedStream() {
  const stream = new (globalThis.ReadableStream as unknown as typeof import("node:stream/web").ReadableStream<Uint8Array>)({ start: (c) => c.close() });
  stream.getReader();
  return stream;
}
