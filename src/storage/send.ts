import { createReadStream, type Stats } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";
import type { Context } from "hono";
import { LabgateError } from "../util/errors.ts";
import { mimeTypes } from "../util/mime.ts";
import { nodeResponse } from "../http/transport.ts";
import { rfc822 } from "../util/time.ts";
import { fileEtag, parseRange } from "./range.ts";
import { LocalStorage } from "./local.ts";
import type { ObjectStore } from "./objects.ts";

export { fileEtag, parseRange };

/**
 * On every file answer: the bytes of a file came from outside (a test, a device, an upload, a
 * node), and even opened directly in a tab they run nothing on the gateway's origin. With
 * `nosniff` (every answer has it, src/http/app.ts) the type given is the type used.
 */
export const FILE_CSP = "sandbox; default-src 'none'";

/** Raster images a browser may show inline: decoded, never run (SVG is a document, not one of them). */
const RASTER = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
/** Types a download keeps as they are: nothing a browser would run or render as a document. */
const PLAIN = new Set(["text/plain", "text/csv", "application/json", "application/octet-stream", "application/gzip", "application/zip", "application/x-tar"]);

/**
 * The head of a file whose bytes came from outside (artifacts, a node's files): a download
 * (`attachment`) under a type guessed from `filename` that no browser runs: raster images and
 * plain types as they are, other text (HTML, SVG, XML, scripts) as `text/plain`, the rest
 * `application/octet-stream`. With `preview`, inline: a raster image as itself, anything else as
 * `text/plain; charset=utf-8` (shown as text, whatever it holds).
 */
export async function untrustedFileHeaders(filename: string, preview: boolean): Promise<Record<string, string>> {
  const { contentType, lookup } = await mimeTypes();
  const guessed = (lookup(filename) || "application/octet-stream").toLowerCase();
  const raster = RASTER.has(guessed);
  const text = guessed.startsWith("text/") || /[/+](?:json|xml|yaml|javascript|ecmascript)$/.test(guessed) || guessed === "application/x-sh";
  const type = raster ? guessed : preview || (text && !PLAIN.has(guessed)) ? "text/plain; charset=utf-8" : PLAIN.has(guessed) ? contentType(guessed) || guessed : "application/octet-stream";
  return { "content-type": type, "content-disposition": contentDisposition(preview ? "inline" : "attachment", filename) };
}

/** `attachment; filename=x` (the reference's form) or a quoted/encoded form for unusual names. */
export function contentDisposition(kind: "attachment" | "inline", filename: string): string {
  if (/^[A-Za-z0-9._-]+$/.test(filename)) return `${kind}; filename=${filename}`;
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, "_");
  return `${kind}; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(filename)}`;
}

const CHUNK = 256 * 1024;
/** Chunks read ahead of the socket at most: 1 MiB per download. */
const POOL = 4;

/**
 * @hono/node-server's marker (its X_ALREADY_SENT) for a response the handler wrote itself; the
 * Response carrying it keeps the real status for the request log.
 */
const ALREADY_SENT = "x-hono-already-sent";

/**
 * Node's Response class. @hono/node-server replaces the global one with a lighter class (whose
 * prototype is Node's) and answers its body-less instances from a cache without looking at the
 * marker, which would write the head a second time.
 */
function platformResponse(): typeof Response {
  const parent: unknown = Object.getPrototypeOf(Response);
  return typeof parent === "function" && parent !== Function.prototype ? (parent as typeof Response) : Response;
}

/**
 * Sends bytes `start..end` (inclusive) of a file (a path, or a handle this then owns) as the body
 * of `res`, whose status and headers are given here. A stream would read each chunk into a fresh
 * buffer, and a long download would leave thousands of them for the garbage collector (RSS grows
 * with the file); here POOL buffers go round: one is read into again only once the socket has
 * taken its bytes.
 * Returns the Response to hand back to @hono/node-server (which then writes nothing).
 */
export function sendFile(res: ServerResponse, status: number, headers: Record<string, string>, source: string | FileHandle, start: number, end: number): Response {
  res.writeHead(status, headers);
  void pump(res, source, start, end);
  const PlatformResponse = platformResponse();
  return new PlatformResponse(null, { status, headers: { [ALREADY_SENT]: "true" } });
}

async function pump(res: ServerResponse, source: string | FileHandle, start: number, end: number): Promise<void> {
  const free = Array.from({ length: POOL }, () => Buffer.allocUnsafeSlow(CHUNK));
  let wake: (() => void) | undefined;
  let closed = false;
  const onClose = () => {
    closed = true;
    wake?.();
  };
  res.once("close", onClose);
  let file: FileHandle | undefined = typeof source === "string" ? undefined : source;
  try {
    file ??= await open(source as string, "r");
    for (let position = start; position <= end && !closed; ) {
      const buf = free.pop();
      if (!buf) {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
        continue;
      }
      const { bytesRead } = await file.read(buf, 0, Math.min(CHUNK, end - position + 1), position);
      if (bytesRead === 0) throw new Error("the file ended early");
      position += bytesRead;
      res.write(bytesRead === CHUNK ? buf : buf.subarray(0, bytesRead), () => {
        free.push(buf);
        wake?.();
      });
    }
    if (!closed) res.end();
  } catch (error) {
    // Headers are out: the only way to tell the client is to cut the connection (as a failing stream did).
    res.destroy(error as Error);
  } finally {
    res.off("close", onClose);
    await file?.close().catch(() => {});
  }
}

/** A file to answer with: its path (opened per request) or a handle already open (closed once answered), and its stat. */
export type FileToServe = { path: string; stat: Stats; handle?: undefined } | { handle: FileHandle; stat: Stats; path?: undefined };

/** The request's If-None-Match names `etag` (or `*`): the answer is a 304. */
export function notModified(c: Context, etag: string): boolean {
  const ifNoneMatch = c.req.header("if-none-match");
  return !!ifNoneMatch && ifNoneMatch.split(",").some((t) => t.trim() === etag || t.trim() === "*");
}

/**
 * The head of an answer for an object of `size` bytes: ETag, Last-Modified, Accept-Ranges,
 * single-range and conditional support; `extra` adds to or overrides the headers (a download,
 * `attachment` as application/octet-stream, unless given; FILE_CSP always). A 304 is answered here; a range that cannot be
 * satisfied throws 416.
 */
function answerHead(
  c: Context,
  size: number,
  modified: Date,
  extra: Record<string, string> = {},
): Response | { status: 200 | 206; headers: Record<string, string>; start: number; end: number; length: number } {
  const etag = fileEtag(size, modified);
  const headers: Record<string, string> = {
    "content-type": "application/octet-stream",
    "content-disposition": "attachment",
    "content-security-policy": FILE_CSP,
    "accept-ranges": "bytes",
    etag,
    "last-modified": rfc822(modified),
    "cache-control": "private, no-transform",
  };
  for (const [name, value] of Object.entries(extra)) headers[name.toLowerCase()] = value;
  if (notModified(c, etag)) return new Response(null, { status: 304, headers });
  const ifRange = c.req.header("if-range");
  const range = ifRange && ifRange.trim() !== etag ? undefined : parseRange(c.req.header("range"), size);
  if (range === "unsatisfiable") {
    c.header("Content-Range", `bytes */${size}`); // kept on the error response built by app.onError
    throw new LabgateError("bad_range", `range not satisfiable (object is ${size} bytes)`);
  }
  const { start, end } = range ?? { start: 0, end: size - 1 };
  const length = size === 0 ? 0 : end - start + 1;
  headers["content-length"] = String(length);
  if (range) headers["content-range"] = `bytes ${start}-${end}/${size}`;
  return { status: range ? 206 : 200, headers, start, end, length };
}

/**
 * Every file answer (packages, device files, reports, artifacts, configs): Content-Length, ETag,
 * Last-Modified, Accept-Ranges, single ranges and If-None-Match / If-Range;
 * HEAD answers the headers only. `headers` adds to or overrides the defaults. With `direct`, the
 * body is sent by sendFile (same bytes, less memory) when the server is @hono/node-server;
 * otherwise through a file stream.
 */
export async function serveFile(c: Context, file: FileToServe, options: { direct?: boolean; headers?: Record<string, string> } = {}): Promise<Response> {
  let head: ReturnType<typeof answerHead>;
  try {
    head = answerHead(c, file.stat.size, file.stat.mtime, options.headers);
  } catch (error) {
    await file.handle?.close();
    throw error;
  }
  if (head instanceof Response || head.length === 0 || c.req.method === "HEAD") {
    await file.handle?.close();
    return head instanceof Response ? head : new Response(null, { status: head.status, headers: head.headers });
  }
  const { status, headers, start, end } = head;
  // Large objects (packages): straight from the file to the socket through a few reused buffers.
  const res = options.direct ? nodeResponse(c.env) : undefined;
  if (res) return sendFile(res, status, headers, file.handle ?? file.path, start, end);
  const stream = file.handle ? file.handle.createReadStream({ start, end, highWaterMark: CHUNK }) : createReadStream(file.path, { start, end, highWaterMark: CHUNK });
  const body = Readable.toWeb(stream) as unknown as ReadableStream<Uint8Array>;
  return new Response(body, { status, headers });
}

/**
 * A file answer made as it is sent (a report's JSON, made from its CSV): no length and no byte
 * ranges, but the validator `etag` (304 when the request names it, before anything is opened),
 * FILE_CSP, and HEAD answered with the headers only. `headers` adds to or overrides the defaults.
 */
export async function serveMade(c: Context, etag: string, headers: Record<string, string>, open: () => Promise<{ stream: Readable; close(): Promise<void> }>): Promise<Response> {
  const head: Record<string, string> = { "content-security-policy": FILE_CSP, etag, "cache-control": "private, no-transform" };
  for (const [name, value] of Object.entries(headers)) head[name.toLowerCase()] = value;
  if (notModified(c, etag)) return new Response(null, { status: 304, headers: head });
  const made = await open();
  if (c.req.method !== "HEAD") return new Response(Readable.toWeb(made.stream) as unknown as ReadableStream<Uint8Array>, { status: 200, headers: head });
  await made.close();
  return new Response(null, { status: 200, headers: head });
}

/**
 * serveFile for a small object held in memory (an action output kept in the database, the
 * console's files); `headers` adds to or overrides the defaults as serveFile's do.
 */
export function serveBytes(c: Context, data: Uint8Array, modified: Date, extra?: Record<string, string>): Response {
  const head = answerHead(c, data.length, modified, extra);
  if (head instanceof Response) return head;
  const { status, headers, start, end, length } = head;
  if (length === 0 || c.req.method === "HEAD") return new Response(null, { status, headers });
  return new Response(data.slice(start, end + 1), { status, headers });
}

/**
 * serveFile for an object of the configured store: the local driver's file as serveFile sends
 * it; an S3 object streamed through as the store answers the request's range and validators
 * (memory stays flat: the store's body goes to the socket as it comes). Undefined when there
 * is no such object.
 */
export async function serveStored(c: Context, objects: ObjectStore, key: string, options: { direct?: boolean; headers?: Record<string, string> } = {}): Promise<Response | undefined> {
  if (objects instanceof LocalStorage) {
    const file = objects.statObject(key);
    return file && serveFile(c, file, options);
  }
  const read = await objects.read(key, { range: c.req.header("range"), ifNoneMatch: c.req.header("if-none-match"), ifRange: c.req.header("if-range"), head: c.req.method === "HEAD" });
  if (!read) return undefined;
  const headers: Record<string, string> = {
    "content-type": "application/octet-stream",
    "content-disposition": "attachment",
    "content-security-policy": FILE_CSP,
    "accept-ranges": "bytes",
    etag: read.etag,
    "last-modified": rfc822(read.modified),
    "cache-control": "private, no-transform",
  };
  for (const [name, value] of Object.entries(options.headers ?? {})) headers[name.toLowerCase()] = value;
  if (read.status === 304) return new Response(null, { status: 304, headers });
  if (read.status === 416) {
    c.header("Content-Range", `bytes */${read.size}`);
    throw new LabgateError("bad_range", `range not satisfiable (object is ${read.size} bytes)`);
  }
  headers["content-length"] = String(read.range ? read.range.end - read.range.start + 1 : read.size);
  if (read.range) headers["content-range"] = `bytes ${read.range.start}-${read.range.end}/${read.size}`;
  const body = read.body ? (Readable.toWeb(read.body) as unknown as ReadableStream<Uint8Array>) : null;
  return new Response(body, { status: read.status, headers });
}
