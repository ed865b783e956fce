/** The Fetch standard's Response, as hono and @hono/node-server use it (src/http/web/install.ts). */
import { Body, BodyReaders, extractBody, readBody, type BodyInit } from "./body.ts";
import { Headers, type HeadersInit } from "./headers.ts";

export interface ResponseInit {
  status?: number;
  statusText?: string;
  headers?: HeadersInit;
}

/** Statuses whose responses have no body. */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);
const REDIRECT = new Set([301, 302, 303, 307, 308]);
const REASON_PHRASE = /^[\t\x20-\x7e\x80-\xff]*$/;

export class Response extends BodyReaders {
  #status: number;
  #statusText: string;
  #headers: Headers;
  #body: Body;
  #type: "default" | "error" = "default";

  constructor(body: BodyInit | null = null, init: ResponseInit = {}) {
    super();
    const status = init.status ?? 200;
    if (!Number.isInteger(status) || status < 200 || status > 599) throw new RangeError(`Response: status ${status} is not in the range 200 to 599`);
    const statusText = String(init.statusText ?? "");
    if (!REASON_PHRASE.test(statusText)) throw new TypeError("Response: invalid statusText");
    this.#status = status;
    this.#statusText = statusText;
    this.#headers = new Headers(init.headers);
    if (body !== null && body !== undefined) {
      if (NULL_BODY.has(status)) throw new TypeError(`Response: a response with status ${status} has no body`);
      const extracted = extractBody(body);
      if (extracted.type && !this.#headers.has("content-type")) this.#headers.set("content-type", extracted.type);
      this.#body = new Body(extracted);
    } else this.#body = new Body(undefined);
  }

  static error(): Response {
    const response = new Response(null, { status: 200 });
    response.#status = 0;
    response.#type = "error";
    return response;
  }

  static redirect(url: string | URL, status = 302): Response {
    if (!REDIRECT.has(status)) throw new RangeError(`Response.redirect: ${status} is not a redirect status`);
    return new Response(null, { status, headers: { location: new URL(url).href } });
  }

  static json(data: unknown, init: ResponseInit = {}): Response {
    const text = JSON.stringify(data);
    if (text === undefined) throw new TypeError("Response.json: the data is not JSON serializable");
    const headers = new Headers(init.headers);
    if (!headers.has("content-type")) headers.set("content-type", "application/json");
    return new Response(text, { ...init, headers });
  }

  get type(): "default" | "error" {
    return this.#type;
  }
  get url(): string {
    return "";
  }
  get redirected(): boolean {
    return false;
  }
  get status(): number {
    return this.#status;
  }
  get ok(): boolean {
    return this.#status >= 200 && this.#status <= 299;
  }
  get statusText(): string {
    return this.#statusText;
  }
  get headers(): Headers {
    return this.#headers;
  }
  get body(): ReadableStream<Uint8Array> | null {
    return this.#body.stream() as ReadableStream<Uint8Array> | null;
  }
  get bodyUsed(): boolean {
    return this.#body.used;
  }

  protected readBodyAs(as: Parameters<typeof readBody>[1]): Promise<unknown> {
    return readBody(this.#body, as, this.#headers.get("content-type"));
  }

  clone(): Response {
    const copy = new Response(null, { status: this.#status === 0 ? 200 : this.#status, statusText: this.#statusText, headers: this.#headers });
    copy.#status = this.#status;
    copy.#type = this.#type;
    copy.#body = this.#body.clone();
    return copy;
  }

  get [Symbol.toStringTag](): string {
    return "Response";
  }
}
