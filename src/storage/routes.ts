import type { Stats } from "node:fs";
import { Readable } from "node:stream";
import { Hono, type Context } from "hono";
import type { AppContext, AppEnv } from "../server/context.ts";
import { httpError } from "../http/errors.ts";
import type { LocalStorage } from "./local.ts";
import { nodeResponse, sendFile } from "./send.ts";

/** Signatures of `/local_storage/` links are bound to this purpose (see TokenService.signLink). */
export const LOCAL_STORAGE_LINK = "local_storage";

/** Base of links handed out: the config's `public_url`, else the request's own scheme and host. */
export function publicBase(ctx: AppContext, c: Context): string {
  return ctx.config.public_url || new URL(c.req.url).origin;
}

/** An absolute, signed, expiring download link for a stored object (D13). */
export function signedObjectUrl(ctx: AppContext, base: string, name: string, ttlSeconds = ctx.config.update_server.download_link_ttl): string {
  const { expires, signature } = ctx.tokens.signLink(LOCAL_STORAGE_LINK, name, ttlSeconds);
  return `${base}/local_storage/${name}?expires=${expires}&signature=${signature}`;
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
 * `GET /local_storage/{name}` (public, but only through a signed link that has not expired):
 * streams the object with Content-Length, ETag, Accept-Ranges and single-range support.
 */
export function localStorageRoutes(ctx: AppContext, storage: LocalStorage): Hono<AppEnv> {
  return new Hono<AppEnv>().get("/local_storage/*", (c) => {
    // Hono already percent-decoded the path; object names never contain '%' themselves.
    const name = c.req.path.slice("/local_storage/".length);
    const verdict = ctx.tokens.verifyLink(LOCAL_STORAGE_LINK, name, c.req.query("expires"), c.req.query("signature"));
    if (verdict === "expired") throw httpError(403, "download link has expired");
    if (verdict !== "ok") throw httpError(403, "download link signature is missing or invalid");
    const object = storage.statObject(name);
    if (!object) throw httpError(404, "object does not exist");

    return serveFile(c, object.stat, (from, to) => storage.read(object.path, from, to), object.path);
  });
}

/**
 * Streams a stored file with Content-Length, ETag, Accept-Ranges, single-range and conditional
 * support (the public storage routes of update-server.md 14.3-14.4). With `path`, the body is
 * sent by sendFile (same bytes, less memory) when the server is @hono/node-server.
 */
export function serveFile(c: Context, stat: Stats, read: (start: number, end: number) => Readable, path?: string): Response {
  const size = stat.size;
  // Objects never change after upload, so size and mtime make a strong validator.
  const etag = `"${size.toString(16)}-${Math.floor(stat.mtimeMs).toString(16)}"`;
  const headers: Record<string, string> = {
    "Content-Type": "application/octet-stream",
    "Accept-Ranges": "bytes",
    ETag: etag,
    "Last-Modified": stat.mtime.toUTCString(),
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
    throw httpError(416, `range not satisfiable (object is ${size} bytes)`);
  }
  const { start, end } = range ?? { start: 0, end: size - 1 };
  const length = size === 0 ? 0 : end - start + 1;
  headers["Content-Length"] = String(length);
  if (range) headers["Content-Range"] = `bytes ${start}-${end}/${size}`;
  const status = range ? 206 : 200;
  if (length === 0 || c.req.method === "HEAD") return new Response(null, { status, headers });
  // Large objects (packages): straight from the file to the socket through a few reused buffers.
  const res = path === undefined ? undefined : nodeResponse(c.env);
  if (res) return sendFile(res, status, headers, path!, start, end);
  const body = Readable.toWeb(read(start, end)) as unknown as ReadableStream<Uint8Array>;
  return new Response(body, { status, headers });
}
