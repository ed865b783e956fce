import { randomUUID } from "node:crypto";
import { Hono, type Context } from "hono";
import { actsByMethod, createAuth, refuseCrossSite, type Auth, type AuthGates } from "../auth/middleware.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { LabgateError } from "../util/errors.ts";
import type { RefusalLog } from "../audit/refusals.ts";
import { refusedRequestOf } from "./actor.ts";
import { answerError, errorAnswer } from "./errors.ts";
import { operationsOf, type Operation } from "./openapi.ts";
import { nodeResponse } from "./transport.ts";
import { InFlight } from "./inflight.ts";
import { systemRoutes } from "./system.ts";

/** A domain's routes, mounted at the root: each domain owns its own paths. */
export type RouteModule = (ctx: AppContext, auth: Auth) => Hono<AppEnv>;

export interface AppOptions {
  /** The routers, mounted in this order (the appliance's are listed in src/server/routes.ts). */
  modules?: RouteModule[];
  /** Hears of every request. */
  inFlight?: InFlight;
  /** The domains' token gates (startDomains). */
  gates?: AuthGates;
  /** Where refused requests (403) are recorded; without one (a test's probe app) they are not. */
  refusals?: RefusalLog;
  /** Filled with the operations the mounted routers registered (`route`): the OpenAPI document's. */
  operations?: Operation[];
}

/** Builds the one Hono app: request log, JSON errors everywhere, the system routes, then the modules in order. */
export function createApp(ctx: AppContext, { modules = [], inFlight = new InFlight(), gates, refusals, operations = [] }: AppOptions = {}): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const auth = createAuth(ctx, gates);
  // On every answer: no content sniffing (an answer is only ever what its type says) and, over
  // TLS, browsers told to come back only over TLS.
  const everyAnswer: Record<string, string> = { "X-Content-Type-Options": "nosniff" };
  if (ctx.config.tls.cert_file) everyAnswer["Strict-Transport-Security"] = "max-age=31536000";

  app.use(async (c, next) => {
    c.json = jsonWithNewline(c);
    const started = performance.now();
    const id = requestIdOf(c.req.header("x-request-id"));
    c.set("requestId", id);
    // On the Node response it goes out with every answer, also one a handler wrote itself (downloads).
    const outgoing = nodeResponse(c.env);
    for (const [name, value] of Object.entries({ "X-Request-Id": id, ...everyAnswer })) {
      if (outgoing) outgoing.setHeader(name, value);
      else c.header(name, value);
    }
    const done = inFlight.add(`${c.req.method} ${c.req.path} [${id}]`);
    try {
      await next();
    } finally {
      done();
    }
    // JSON answers are the API's: accounts, tokens, sessions, devices. None is kept in a cache
    // (shared or the browser's) unless its route says otherwise (the JSON report's ETag).
    const answer = c.res;
    if (/^application\/json/i.test(answer.headers.get("content-type") ?? "") && !answer.headers.has("cache-control")) {
      try {
        answer.headers.set("Cache-Control", "no-store");
      } catch {
        // Immutable headers (a Response made by fetch): a copy of the answer carries it.
        const headers = new Headers(answer.headers);
        headers.set("Cache-Control", "no-store");
        c.res = new Response(answer.body, { status: answer.status, statusText: answer.statusText, headers });
      }
    }
    const status = c.res.status;
    // Checked before formatting: below info (log_level warn, error) most requests log nothing.
    if (!ctx.log.enabled(status >= 500 ? "warn" : "info")) return;
    const ms = performance.now() - started;
    const line = `${c.req.method} ${c.req.path} ${status} ${ms.toFixed(1)}ms`;
    const fields = { request_id: id, method: c.req.method, path: c.req.path, status, ms: Math.round(ms * 10) / 10 };
    if (status >= 500) ctx.log.warn(line, fields);
    else ctx.log.info(line, fields);
  });

  // Nothing a page of another site sends acts (src/auth/middleware.ts, refuseCrossSite).
  app.use(async (c, next) => {
    if (actsByMethod(c)) refuseCrossSite(c, ctx.config.test_server.cors_origins);
    await next();
  });

  app.onError(async (error, c) => {
    // A refused authorization is in the audit log before the answer goes.
    const refused = errorAnswer(error);
    if (refused?.status === 403) await refusals?.record(refusedRequestOf(c), refused.message);
    return answerError(c, error, ctx.log);
  });
  app.notFound((c) => answerError(c, new LabgateError("not_found", `no route for ${c.req.method} ${c.req.path}`), ctx.log));

  for (const router of [systemRoutes(ctx, auth), ...modules.map((module) => module(ctx, auth))]) {
    app.route("/", router);
    operations.push(...operationsOf(router));
  }
  return app;
}

/** A request id the client sent (`X-Request-Id`, kept when it is short and plain), else a new one. */
function requestIdOf(given: string | undefined): string {
  return given !== undefined && /^[A-Za-z0-9._:-]{1,64}$/.test(given) ? given : randomUUID();
}

/**
 * `c.json` with the body ending in a newline, as the reference servers' JSON does (clients'
 * scripts compare `[]` plus a newline). Hono has no hook for its JSON serialiser, so the first
 * middleware installs this one on every request's context; errors and 404s go through it too.
 * Streamed JSON (the report's JSON form) ends its last chunk the same way.
 */
function jsonWithNewline(c: Context): Context["json"] {
  // Same arguments and header handling as Hono's own c.json; only the text differs.
  const respond = c.newResponse as (data: string, arg?: ResponseInit | number, headers?: Record<string, string>) => Response;
  return ((object: unknown, arg?: ResponseInit | number, headers?: Record<string, string>) =>
    respond(JSON.stringify(object) + "\n", arg, { "Content-Type": "application/json", ...headers })) as Context["json"];
}

/** Repeated slashes are served as one (protoplaster's manager CLI sends `//api/v1/...`). */
export function normalizeRequest(request: Request): Request {
  const target = request.url;
  // Parsing the URL only when its text could hold repeated slashes (also as a backslash, which the
  // URL parser reads as one, or around a tab or newline, which it drops) saves it on nearly every request.
  if (target.indexOf("//", target.indexOf("://") + 3) < 0 && !/[\\\t\n\r]/.test(target)) return request;
  const url = new URL(target);
  if (!url.pathname.includes("//")) return request;
  url.pathname = url.pathname.replace(/\/{2,}/g, "/");
  return new Request(url, request);
}
