import { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import type { Context } from "hono";
import { LabgateError } from "../util/errors.ts";

/**
 * The request body as a Node stream, straight from @hono/node-server's IncomingMessage when
 * nothing has read it yet: it skips the Node -> web -> Node stream adapters behind
 * `c.req.raw.body` (a large part of a small JSON request's time, and CPU on every upload chunk).
 * A request rewritten by normalizeRequest (its body moved into a new Request) uses the web stream.
 */
export function requestBodyStream(c: Context): Readable | undefined {
  const incoming = (c.env as { incoming?: unknown } | undefined)?.incoming;
  if (incoming instanceof IncomingMessage && !incoming.readableDidRead && !(incoming.url ?? "").includes("//")) return incoming;
  const body = c.req.raw.body;
  return body ? Readable.fromWeb(body as import("node:stream/web").ReadableStream) : undefined;
}

export const JSON_BODY_LIMIT = 1024 * 1024;

/** Reads a request body up to `limit` bytes; more is a 413 without reading the rest into memory. */
export async function readBodyBytes(c: Context, limit: number): Promise<Buffer> {
  const declared = Number(c.req.header("content-length") ?? NaN);
  if (declared > limit) throw new LabgateError("too_large", `request body is larger than ${limit} bytes`);
  const body = requestBodyStream(c);
  if (!body) return Buffer.alloc(0);
  // Events rather than `for await`: the async iterator cost several percent of a small JSON
  // request (update checks). Same outcomes: the bytes, a 413 that stops reading (the stream is
  // destroyed, as leaving a for-await loop does), or the stream's error / premature close.
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const done = (error?: Error) => {
      // The error listener stays: a late error must not become an uncaught one.
      body.off("data", onData).off("end", onEnd).off("close", cut);
      if (error) reject(error);
    };
    const onData = (chunk: Buffer | Uint8Array) => {
      total += chunk.byteLength;
      if (total > limit) {
        done(new LabgateError("too_large", `request body is larger than ${limit} bytes`));
        body.destroy();
        return;
      }
      chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    };
    const onEnd = () => {
      done();
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total));
    };
    // A client that leaves mid-body is a 400 (nobody reads it), not a server error with Node's "aborted".
    const cut = () => done(new LabgateError("invalid", "the request body ended early"));
    body.on("data", onData).once("end", onEnd).on("error", cut).once("close", cut);
  });
}

/** Deepest nesting of arrays and objects a JSON body may have: stored values are serialised again, recursively. */
export const JSON_MAX_DEPTH = 64;

/**
 * Whether JSON text nests arrays or objects deeper than `max` (one pass, strings skipped).
 * JSON.parse takes any depth, but JSON.stringify and schema checks recurse: 5,000 levels of
 * `{"a":` in a group's metadata overflowed the stack (a 500) when the row was written.
 */
export function jsonTooDeep(text: string, max = JSON_MAX_DEPTH): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    if (inString) {
      if (ch === 0x5c) i++; // backslash: skip the escaped character
      else if (ch === 0x22) inString = false;
    } else if (ch === 0x22) inString = true;
    else if (ch === 0x5b || ch === 0x7b) {
      if (++depth > max) return true;
    } else if (ch === 0x5d || ch === 0x7d) depth--;
  }
  return false;
}

/** Reads and parses a JSON body: another Content-Type is a 415, anything unparsable (or nested deeper than JSON_MAX_DEPTH) a 400 saying why. */
export async function readJson(c: Context, limit = JSON_BODY_LIMIT): Promise<unknown> {
  // A page of another site can send a body only as text/plain, a form or a Blob without a type
  // (no preflight): a JSON route that reads nothing else cannot be driven that way.
  const type = c.req.header("content-type");
  if (!type || !/^application\/(?:[\w.+-]*\+)?json\s*(?:;|$)/i.test(type)) {
    throw new LabgateError("unsupported_media", `expected a JSON body (Content-Type: application/json), got ${type ? type : "no Content-Type"}`);
  }
  const bytes = await readBodyBytes(c, limit);
  if (bytes.length === 0) throw new LabgateError("invalid", "request body is empty; expected JSON");
  return parseJsonBody(bytes);
}

/** Parses the bytes of a JSON body: too deep or unparsable is a 400 saying why. */
export function parseJsonBody(bytes: Buffer): unknown {
  const text = bytes.toString("utf8");
  if (jsonTooDeep(text)) throw new LabgateError("invalid", `malformed JSON body: nested deeper than ${JSON_MAX_DEPTH} levels`);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new LabgateError("invalid", `malformed JSON body${jsonErrorPlace(text, (error as Error).message)}`);
  }
}

/**
 * Where JSON.parse stopped, as " at line L, column C", or "" when it does not say. The runtime's
 * own text is not passed on: it differs between Node 20 and 24, and is the runtime's, not ours.
 */
function jsonErrorPlace(text: string, message: string): string {
  const found = /position (\d{1,10})/.exec(message);
  if (!found) return text.trim() === "" ? ": no JSON value" : ": not valid JSON";
  const position = Math.min(Number(found[1]), text.length);
  const before = text.slice(0, position);
  const line = before.split("\n").length;
  return ` at line ${line}, column ${position - before.lastIndexOf("\n")}`;
}
