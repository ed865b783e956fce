import { existsSync, readFileSync } from "node:fs";
import { Hono, type Context } from "hono";
import type { Auth } from "../auth/middleware.ts";
import { LabgateError } from "../util/errors.ts";
import { errors, route } from "../http/openapi.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { serveBytes } from "../storage/send.ts";
import { mimeTypes } from "../util/mime.ts";
import { seaAssets } from "../util/sea.ts";
import { dateOf } from "../util/time.ts";
import { buildConsole } from "./build.ts";

/** Where the console's files come from: the executable, dist/console beside the bundle, or a build from source. */
type Source = (name: string) => Promise<Uint8Array | undefined>;

function consoleSource(): Source {
  const sea = seaAssets();
  if (sea) {
    // build/sea-config.mjs adds dist/console/<name> as the asset console/<name>.
    return async (name) => {
      try {
        return new Uint8Array(sea.getAsset(`console/${name}`));
      } catch {
        return undefined;
      }
    };
  }
  // dist/labgate.cjs: import.meta.url is the bundle, dist/console/ was built beside it.
  const dir = new URL("./console/", import.meta.url);
  if (existsSync(new URL("index.html", dir))) {
    return async (name) => {
      const file = new URL(name, dir);
      return existsSync(file) ? readFileSync(file) : undefined;
    };
  }
  // From source (npm start, tests): built in memory once per process, on the first request.
  return async (name) => (await buildConsole()).files.get(name);
}

const NAME = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9]+)+$/;
/** The page itself: only our own scripts and styles, no framing, same-origin requests only. */
const PAGE_HEADERS = {
  "Content-Security-Policy":
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "same-origin",
  "X-Frame-Options": "DENY",
};

/** A console file through the one file sender (validators, ranges, HEAD), shown in place, never a download. */
async function serve(c: Context, source: Source, since: Date, name: string, cache: string): Promise<Response> {
  if (!NAME.test(name)) throw new LabgateError("not_found", `no route for GET ${c.req.path}`);
  const body = await source(name);
  if (!body) throw new LabgateError("not_found", `no route for GET ${c.req.path}`);
  const type = (await mimeTypes()).contentType(name) || "application/octet-stream";
  return serveBytes(c, body, since, {
    "Content-Type": type,
    "Content-Disposition": "inline",
    "Cache-Control": cache,
    ...(name === "index.html" ? PAGE_HEADERS : { "X-Content-Type-Options": "nosniff" }),
  });
}

/**
 * The web console: `/` is its page (no auth: it holds no data; the API it calls checks
 * every request), `/console/<name>` its scripts and styles, named by content hash, so cached for good.
 */
export function consoleRoutes(ctx: AppContext, _auth: Auth): Hono<AppEnv> {
  // Looked for on the first request (a server that serves no page builds nothing).
  let source: Source | undefined;
  const files: Source = (name) => (source ??= consoleSource())(name);
  // The files do not change while the server runs: their Last-Modified is its start.
  const since = dateOf(ctx.clock);
  const app = new Hono<AppEnv>();
  const tag = "console";
  route(app, { method: "get", path: "/", tag, access: "public", summary: "The web console's page", responses: { 200: { description: "The page", media: "text/html" } } }, (c) =>
    serve(c, files, since, "index.html", "no-cache"),
  );
  // ASSET_PREFIX (build.ts) is /console/.
  route(
    app,
    {
      method: "get",
      path: "/console/:name",
      tag,
      access: "public",
      summary: "A script or style of the console (named by content hash, cached for good)",
      responses: { 200: { description: "The file", media: "text/javascript" }, 404: errors[404] },
    },
    (c) => serve(c, files, since, c.req.param("name") ?? "", "public, max-age=31536000, immutable"),
  );
  return app;
}
