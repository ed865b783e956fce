import { Hono, type Context } from "hono";
import type { AppContext, AppEnv } from "../app/context.ts";
import { LabgateError } from "../util/errors.ts";
import { errors, route } from "../http/openapi.ts";
import { isTls } from "../http/transport.ts";
import type { PackageStorage } from "./packages.ts";
import { serveStored } from "./send.ts";
import { LOCAL_STORAGE_LINK, objectLink, signedObjectUrl } from "./links.ts";

export { LOCAL_STORAGE_LINK, objectLink, signedObjectUrl };


/** Base of links handed out: the config's `public_url`, else the connection's scheme and the request's host. */
export function publicBase(ctx: Pick<AppContext, "config">, c: Context): string {
  return ctx.config.public_url || `${isTls(c) ? "https" : "http"}://${new URL(c.req.url).host}`;
}


/** Throws the 403 of a public download whose link for `name` is expired, unsigned or forged. */
export function requireSignedLink(ctx: AppContext, c: Context, purpose: string, name: string): void {
  const verdict = ctx.tokens.verifyLink(purpose, name, c.req.query("expires"), c.req.query("signature"));
  if (verdict === "expired") throw new LabgateError("forbidden", "download link has expired");
  if (verdict !== "ok") throw new LabgateError("forbidden", "download link signature is missing or invalid");
}

/**
 * `GET /local_storage/{name}` (public, but only through a signed link that has not expired):
 * streams the object with Content-Length, ETag, Accept-Ranges and single-range support.
 */
export function localStorageRoutes(ctx: AppContext, storage: PackageStorage): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const file = { description: "The file", media: "application/octet-stream" };
  route(
    app,
    {
      method: "get",
      path: "/local_storage/*",
      tag: "packages",
      access: "public",
      summary: "A package object through a signed link (Range supported)",
      responses: { 200: file, 206: { ...file, description: "Part of the file" }, 403: errors[403], 404: errors[404], 416: errors[416], 503: errors[503] },
    },
    async (c) => {
      // Hono already percent-decoded the path; object names never contain '%' themselves.
      const name = c.req.path.slice("/local_storage/".length);
      requireSignedLink(ctx, c, LOCAL_STORAGE_LINK, name);
      const answer = await serveStored(c, storage.objects, name, { direct: true });
      if (!answer) throw new LabgateError("not_found", "object does not exist");
      return answer;
    },
  );
  return app;
}
