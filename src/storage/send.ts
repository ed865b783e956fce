import { createReadStream, type Stats } from "node:fs";
import { open } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";
import type { Context } from "hono";
import { LabgateError } from "../util/errors.ts";
import { nodeResponse } from "../http/transport.ts";
import { rfc822 } from "../util/time.ts";

const CHUNK = 256 * 1024;
/** Chunks read ahead of the socket at most: 1 MiB per download. */
const POOL = 4;

/**
 * @hono/node-server's marker (its X_ALREADY_SENT) for a response the handler wrote itself; the
 * Response carrying it keeps the real status for the request log.
 */
const ALREADY_SENT = "x-hono-already-sent";

/**
 * The platform's Response class. @hono/node-server replaces the global one with a lighter class
 * (whose prototype is the original) and answers its body-less instances from a cache without
 * looking at the marker, which would write the head a second time.
 */
function platformResponse(): typeof Response {
  const parent: unknown = Object.getPrototypeOf(Response);
  return typeof parent === "function" && parent !== Function.prototype ? (parent as typeof Response) : Response;
}

/**
 * Sends bytes `start..end` (inclusive) of a file as the body of `res`, whose status and headers
 * are given here. A stream would read each chunk into a fresh buffer, and a 1 GiB download left
 * thousands of 256 KiB buffers for the garbage collector (about +35 MB of RSS at its peak); here
 * POOL buffers go round: one is read into again only once the socket has taken its bytes.
 * Returns the Response to hand back to @hono/node-server (which then writes nothing).
 */
export function sendFile(res: ServerResponse, status: number, headers: Record<string, string>, path: string, start: number, end: number): Response {
  res.writeHead(status, headers);
  void pump(res, path, start, end);
  const PlatformResponse = platformResponse();
  return new PlatformResponse(null, { status, headers: { [ALREADY_SENT]: "true" } });
}

async function pump(res: ServerResponse, path: string, start: number, end: number): Promise<void> {
  const free = Array.from({ length: POOL }, () => Buffer.allocUnsafeSlow(CHUNK));
  let wake: (() => void) | undefined;
  let closed = false;
  const onClose = () => {
    closed = true;
    wake?.();
  };
  res.once("close", onClose);
  let file: Awaited<ReturnType<typeof open>> | undefined;
  try {
    file = await open(path, "r");
    for (let position = start; position <= end && !closed; ) {
      const buf = free.pop();
      if (!buf) {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
        continue;
      }
      const { bytesRead } = await file.read(buf, 0, Math.min(CHUNK, end - position + 1), position);
      if (bytesRead === 0) throw new Error(`${path} ended early`);
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

type ByteRange = { start: number; end: number } | "unsatisfiable" | undefined;

/**
 * Parses a single `bytes=` range against `size`. Undefined means "serve the whole object"
 * (no header, another unit, several ranges or garbage: RFC 9110 lets a server ignore those).
 * An empty object is always served whole: the reference device client sends `bytes=0-` on
 * every download and needs a 200 or 206, and no range of zero bytes can be satisfied.
 */
export function parseRange(header: string | undefined, size: number): ByteRange {
  if (!header || size === 0) return undefined;
  const match = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0) return "unsatisfiable";
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(match[1]);
  const end = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
  if (match[2] !== "" && Number(match[2]) < start) return undefined;
  if (start >= size) return "unsatisfiable";
  return { start, end };
}

/**
 * The head of an answer for an object of `size` bytes: ETag, Last-Modified, Accept-Ranges,
 * single-range and conditional support. A 304 is answered here; a range that cannot be
 * satisfied throws 416.
 */
function answerHead(c: Context, size: number, modified: Date): Response | { status: 200 | 206; headers: Record<string, string>; start: number; end: number; length: number } {
  // Objects never change once stored, so size and modification time make a strong validator.
  const etag = `"${size.toString(16)}-${Math.floor(modified.getTime()).toString(16)}"`;
  const headers: Record<string, string> = {
    "Content-Type": "application/octet-stream",
    "Accept-Ranges": "bytes",
    ETag: etag,
    "Last-Modified": rfc822(modified),
    "Cache-Control": "private, no-transform",
  };
  const ifNoneMatch = c.req.header("if-none-match");
  if (ifNoneMatch && ifNoneMatch.split(",").some((t) => t.trim() === etag || t.trim() === "*")) {
    return new Response(null, { status: 304, headers });
  }
  const ifRange = c.req.header("if-range");
  const range = ifRange && ifRange.trim() !== etag ? undefined : parseRange(c.req.header("range"), size);
  if (range === "unsatisfiable") {
    c.header("Content-Range", `bytes */${size}`); // kept on the error response built by app.onError
    throw new LabgateError("bad_range", `range not satisfiable (object is ${size} bytes)`);
  }
  const { start, end } = range ?? { start: 0, end: size - 1 };
  const length = size === 0 ? 0 : end - start + 1;
  headers["Content-Length"] = String(length);
  if (range) headers["Content-Range"] = `bytes ${start}-${end}/${size}`;
  return { status: range ? 206 : 200, headers, start, end, length };
}

/**
 * Streams a stored file with Content-Length, ETag, Accept-Ranges, single-range and conditional
 * support (the public storage routes of update-server.md 14.3-14.4). With `direct`, the body is
 * sent by sendFile (same bytes, less memory) when the server is @hono/node-server; otherwise
 * through a file stream.
 */
export function serveFile(c: Context, file: { path: string; stat: Stats }, options: { direct?: boolean } = {}): Response {
  const { path, stat } = file;
  const head = answerHead(c, stat.size, stat.mtime);
  if (head instanceof Response) return head;
  const { status, headers, start, end, length } = head;
  if (length === 0 || c.req.method === "HEAD") return new Response(null, { status, headers });
  // Large objects (packages): straight from the file to the socket through a few reused buffers.
  const res = options.direct ? nodeResponse(c.env) : undefined;
  if (res) return sendFile(res, status, headers, path, start, end);
  const body = Readable.toWeb(createReadStream(path, { start, end, highWaterMark: CHUNK })) as unknown as ReadableStream<Uint8Array>;
  return new Response(body, { status, headers });
}

/** serveFile for a small object held in memory (e.g. an action output kept in the database). */
export function serveBytes(c: Context, data: Uint8Array, modified: Date): Response {
  const head = answerHead(c, data.length, modified);
  if (head instanceof Response) return head;
  const { status, headers, start, end, length } = head;
  if (length === 0 || c.req.method === "HEAD") return new Response(null, { status, headers });
  return new Response(data.slice(start, end + 1), { status, headers });
}
