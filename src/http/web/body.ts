/**
 * The body of a Request or Response (the Fetch standard's "body mixin"): kept as given (text or
 * bytes) until someone asks for the stream, read once.
 */
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { formDataBody } from "./form-data.ts";

export type BodyInit = string | ArrayBuffer | ArrayBufferView | Blob | URLSearchParams | FormData | WebReadableStream<Uint8Array> | ReadableStream<Uint8Array>;

/** What a body was made of: text or bytes (still whole), or a stream. */
export interface Extracted {
  source: string | Uint8Array | undefined;
  stream: WebReadableStream<Uint8Array> | undefined;
  /** The Content-Type the body implies, when the headers have none. */
  type: string | undefined;
}

const isStream = (value: unknown): value is WebReadableStream<Uint8Array> => typeof (value as { getReader?: unknown } | null)?.getReader === "function";

export function extractBody(init: BodyInit): Extracted {
  if (typeof init === "string") return { source: init, stream: undefined, type: "text/plain;charset=UTF-8" };
  // Not copied (the standard copies): labgate never changes bytes it has handed to a body.
  if (init instanceof Uint8Array) return { source: init, stream: undefined, type: undefined };
  if (init instanceof ArrayBuffer) return { source: new Uint8Array(init.slice(0)), stream: undefined, type: undefined };
  if (ArrayBuffer.isView(init)) return { source: new Uint8Array(init.buffer.slice(init.byteOffset, init.byteOffset + init.byteLength)), stream: undefined, type: undefined };
  if (init instanceof URLSearchParams) return { source: init.toString(), stream: undefined, type: "application/x-www-form-urlencoded;charset=UTF-8" };
  if (init instanceof Blob) return { source: undefined, stream: init.stream() as WebReadableStream<Uint8Array>, type: init.type || undefined };
  if (isStream(init)) return { source: undefined, stream: init, type: undefined };
  // A FormData (Node's own class, which only a caller that made one has loaded).
  if (typeof (init as FormData).getAll === "function" && typeof (init as FormData).entries === "function") return { source: undefined, ...formDataBody(init as FormData) };
  return { source: String(init), stream: undefined, type: "text/plain;charset=UTF-8" };
}

const decoder = new TextDecoder();

/** A body: `stream()` for the standard's `body`, the readers for text(), json() and the rest. */
export class Body {
  #source: string | Uint8Array | undefined;
  #stream: WebReadableStream<Uint8Array> | undefined;
  #used = false;

  constructor(extracted: Extracted | undefined) {
    this.#source = extracted?.source;
    this.#stream = extracted?.stream;
  }

  get isNull(): boolean {
    return this.#source === undefined && this.#stream === undefined;
  }

  get used(): boolean {
    // A stream locked by a reader: the standard's "disturbed", as far as a stream shows it.
    return this.#used || this.#stream?.locked === true;
  }

  stream(): WebReadableStream<Uint8Array> | null {
    if (this.#stream) return this.#stream;
    if (this.#source === undefined) return null;
    const bytes = typeof this.#source === "string" ? Buffer.from(this.#source) : this.#source;
    this.#source = undefined;
    this.#stream = new (globalThis.ReadableStream as unknown as typeof WebReadableStream<Uint8Array>)({
      start(controller) {
        if (bytes.byteLength > 0) controller.enqueue(bytes);
        controller.close();
      },
    });
    return this.#stream;
  }

  async bytes(): Promise<Uint8Array> {
    if (this.used) throw new TypeError("Body is unusable: Body has already been read");
    this.#used = true;
    if (!this.#stream) return typeof this.#source === "string" ? Buffer.from(this.#source) : new Uint8Array(this.#source ?? new Uint8Array(0));
    if (this.#stream.locked) throw new TypeError("Body is unusable: the stream is locked");
    const chunks: Uint8Array[] = [];
    for await (const chunk of this.#stream) chunks.push(chunk);
    return Buffer.concat(chunks);
  }

  async text(): Promise<string> {
    if (!this.#stream && typeof this.#source === "string" && !this.used) {
      this.#used = true;
      return this.#source;
    }
    return decoder.decode(await this.bytes());
  }

  /** The same body twice: a stream is teed (this one keeps one branch), text and bytes are shared. */
  clone(): Body {
    if (this.used) throw new TypeError("Body is unusable: Body has already been read");
    const copy = new Body(undefined);
    if (this.#stream) {
      const [mine, theirs] = this.#stream.tee();
      this.#stream = mine;
      copy.#stream = theirs;
    } else copy.#source = this.#source;
    return copy;
  }
}

type ReadAs = "arrayBuffer" | "bytes" | "blob" | "json" | "text" | "formData";

/** The standard's body mixin: the readers Request and Response share, over their Body. */
export abstract class BodyReaders {
  /** The body read as `as` (`type`, the Content-Type, for a Blob's type and a form's boundary). */
  protected abstract readBodyAs(as: ReadAs): Promise<unknown>;

  arrayBuffer(): Promise<ArrayBuffer> {
    return this.readBodyAs("arrayBuffer") as Promise<ArrayBuffer>;
  }
  bytes(): Promise<Uint8Array> {
    return this.readBodyAs("bytes") as Promise<Uint8Array>;
  }
  blob(): Promise<Blob> {
    return this.readBodyAs("blob") as Promise<Blob>;
  }
  formData(): Promise<FormData> {
    return this.readBodyAs("formData") as Promise<FormData>;
  }
  json(): Promise<unknown> {
    return this.readBodyAs("json");
  }
  text(): Promise<string> {
    return this.readBodyAs("text") as Promise<string>;
  }
}

export async function readBody(body: Body, as: ReadAs, type: string | null): Promise<unknown> {
  switch (as) {
    case "text":
      return body.text();
    case "json":
      return JSON.parse(await body.text()) as unknown;
    case "bytes":
      return body.bytes();
    case "arrayBuffer": {
      const bytes = await body.bytes();
      return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    }
    case "blob":
      return new Blob([(await body.bytes()) as Uint8Array<ArrayBuffer>], { type: type ?? "" });
    case "formData": {
      // Parsed by Node's own Response (undici, loaded for this only: labgate's routes read multipart
      // with busboy), whose class a fetch of a data: URL gives.
      const NodeResponse = (await fetch("data:,")).constructor as typeof Response;
      return new NodeResponse((await body.bytes()) as Uint8Array<ArrayBuffer>, { headers: type ? { "content-type": type } : {} }).formData();
    }
  }
}
