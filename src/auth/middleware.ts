import type { Context, MiddlewareHandler } from "hono";
import { getCookie } from "hono/cookie";
import type { AppContext, AppEnv } from "../app/context.ts";
import { LabgateError } from "../util/errors.ts";
import { grantsAny, type Scope } from "./scopes.ts";
import { TokenService, type DeviceIdentity, type ManagementIdentity, type TokenFailure } from "./tokens.ts";
import { currentIdentity, type AccountGate } from "./authority.ts";

export const MSG_NO_HEADER = "no Authorization header was provided";
export const MSG_NOT_BEARER = "invalid authorization - expected authorization type Bearer";
export const MSG_NO_TOKEN = "invalid authorization - missing field: token";
export const MSG_SCOPE = "accessing this resource requires OAuth2 scopes which are not provided by the authenticated client";
export const MSG_CROSS_SITE = "cross-site request refused";

/** The console's session cookie: a short-lived management token (src/accounts/routes.ts sets it). */
export const SESSION_COOKIE = "labgate_session";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The test-run API's paths: the only ones src/server/routes.ts sends CORS headers on, and the
 * only ones an origin listed in `test_server.cors_origins` may act on.
 */
export const CORS_PATHS = ["/api/v1/configs", "/api/v1/test-runs", "/api/v1/test-nodes", "/api/v1/test-targets"];

/** Whether a request changes something or runs something by its method: all but GET, HEAD and OPTIONS, and every WebSocket upgrade. */
export function actsByMethod(c: Context): boolean {
  return !SAFE_METHODS.has(c.req.method) || c.req.header("upgrade")?.toLowerCase() === "websocket";
}

/**
 * Refuses a request that acts when a browser says a page of another origin made it: its
 * `Sec-Fetch-Site` is `cross-site` or `same-site` (another port or subdomain of the same host is
 * "same-site", and gets SameSite cookies), or its `Origin` is not this server's. Whatever the
 * authentication: with `test_server.auth: none` a page's "simple" request (a form, text/plain,
 * a Blob, an image) is enough to act. Clients that send neither header (curl, the agent, the
 * reference tools) pass; so does an origin the administrator listed in `cors_origins` (an
 * explicit entry, not "*"), on the test-run paths that CORS opens to it.
 */
export function refuseCrossSite(c: Context, corsOrigins: readonly string[]): void {
  const origin = c.req.header("origin");
  if (origin !== undefined && corsOrigins.includes(origin) && CORS_PATHS.some((p) => c.req.path === p || c.req.path.startsWith(`${p}/`))) return;
  const site = c.req.header("sec-fetch-site")?.toLowerCase();
  if (site === "cross-site" || site === "same-site") throw new LabgateError("forbidden", MSG_CROSS_SITE);
  if (origin !== undefined && !ownOrigin(c, origin)) throw new LabgateError("forbidden", MSG_CROSS_SITE);
}

/** `origin` (an Origin header, or a Referer) has the host:port of the request's `Host` header. */
function ownOrigin(c: Context, origin: string): boolean {
  const host = c.req.header("host");
  if (!host || origin === "null") return false;
  try {
    const from = new URL(origin);
    // The Host header in the same scheme's URL form, so that default ports compare equal.
    return from.host === new URL(`${from.protocol}//${host}`).host;
  } catch {
    return false;
  }
}

/**
 * Whether the request names this server as where it comes from: its `Origin` (or, without one,
 * its `Referer`) has the host:port of the `Host` header. Browsers add Origin to every POST,
 * PUT, PATCH, DELETE and WebSocket upgrade, and a Referer to the rest unless told not to.
 */
export function sameOrigin(c: Context): boolean {
  const source = c.req.header("origin") ?? c.req.header("referer");
  return source !== undefined && ownOrigin(c, source);
}

const SIMPLE_TOKEN = /^Bearer token=[\w.-]+$/;

/**
 * Extracts the token from `Bearer token=<T>`, `Bearer token="<T>"` or `Bearer <T>`.
 * Returns an error message for anything else. The header is attacker input: this parses it
 * with linear scans only (no backtracking regular expression over runs of spaces).
 */
export function parseAuthorization(header: string | undefined): { token: string } | { error: string } {
  // The form every labgate client sends (same result as the general parse below).
  if (header?.startsWith("Bearer token=") && SIMPLE_TOKEN.test(header)) return { token: header.slice(13) };
  const text = header?.trim() ?? "";
  if (text === "") return { error: MSG_NO_HEADER };
  const gap = text.search(/\s/);
  if (gap < 0 || text.slice(0, gap).toLowerCase() !== "bearer") return { error: MSG_NOT_BEARER };
  const rest = text.slice(gap).trim();
  // `rest` is trimmed, so an "=" anywhere but at its end has a value after it.
  const eq = rest.indexOf("=");
  if (eq < 0 || eq === rest.length - 1) return { token: rest };
  for (const part of rest.split(",")) {
    const token = tokenParam(part.trim());
    if (token) return { token };
  }
  return { error: MSG_NO_TOKEN };
}

/** The value of a `token=<T>` or `token="<T>"` auth-param, or undefined for any other part. */
function tokenParam(part: string): string | undefined {
  const eq = part.indexOf("=");
  if (eq < 0 || !/^[A-Za-z_]+$/.test(part.slice(0, eq).trimEnd())) return undefined;
  if (part.slice(0, eq).trimEnd().toLowerCase() !== "token") return undefined;
  let value = part.slice(eq + 1).trimStart();
  if (value.startsWith('"')) value = value.slice(1);
  if (value.endsWith('"')) value = value.slice(0, -1);
  return value === "" || value.includes('"') ? undefined : value;
}

const FAILURE_MESSAGES: Record<TokenFailure, string> = {
  malformed: "invalid token was provided",
  bad_signature: "invalid token was provided",
  expired: "token has expired",
  wrong_type: "this token type is not accepted here",
};

type Kind = "mgmt" | "device" | "any";

/**
 * The token of a request: the `Authorization` header, else `fallback` (e.g. a WebSocket's
 * `?token=` as a header value), else the session cookie. A cookie is sent by the browser on its
 * own, so a request it authenticates that changes something (or opens a WebSocket) must come
 * from this server's pages (CSRF): else 403.
 */
function requestToken(c: Context, fallback: string | undefined): { token: string } | { error: string } {
  const header = c.req.header("authorization") ?? fallback;
  if (header !== undefined) return parseAuthorization(header);
  const cookie = getCookie(c, SESSION_COOKIE);
  if (!cookie) return parseAuthorization(undefined);
  if ((actsByMethod(c) || actsOnGet.has(c)) && !sameOrigin(c)) throw new LabgateError("forbidden", MSG_CROSS_SITE);
  return { token: cookie };
}

/** Requests to a route that acts on GET (see `actsOnGet` in createAuth), for requestToken's cookie rule. */
const actsOnGet = new WeakSet<Context>();

/** What each check made by createAuth asks for (docs/routes.md shows it per route). */
const requirements = new WeakMap<object, string>();

/** What `handler` asks for when it is a check made by createAuth: `device`, `any`, `mgmt` or `mgmt: <scope> or <scope>`. */
export const requirementOf = (handler: unknown): string | undefined => (typeof handler === "function" ? requirements.get(handler) : undefined);

/**
 * Checks beyond a token's signature, each made by the domain that owns the records (start.ts
 * hands them over from startDomains); absent, every valid token passes.
 */
export interface AuthGates {
  /** A device token is good while its device exists with that key (update/devices/gate.ts). */
  device?: (identity: DeviceIdentity) => boolean | Promise<boolean>;
  /** A management token acts as its account stands now (accounts; src/auth/authority.ts). */
  account?: AccountGate;
}

/** Builds the one auth check every route uses. */
export function createAuth(ctx: AppContext, gates: AuthGates = {}) {
  /** The caller of `c` (see requestToken for where the token comes from); 401/403 when none fits `kind`. */
  async function authenticate(c: Context, kind: Kind, fallback?: string): Promise<ManagementIdentity | DeviceIdentity> {
    const parsed = requestToken(c, fallback);
    if ("error" in parsed) throw new LabgateError("unauthenticated", parsed.error);
    const claimed = ctx.tokens.knownType(parsed.token) ?? TokenService.claimedType(parsed.token);
    if (kind !== "any" && claimed !== undefined && claimed !== kind) throw new LabgateError("unauthenticated", FAILURE_MESSAGES.wrong_type);
    const verifyAs = kind === "any" ? (claimed ?? "mgmt") : kind;
    const result = verifyAs === "device" ? ctx.tokens.verifyDevice(parsed.token) : ctx.tokens.verifyManagement(parsed.token);
    if (typeof result === "string") throw new LabgateError("unauthenticated", FAILURE_MESSAGES[result]);
    if (result.kind === "device" && gates.device && !(await gates.device(result))) throw new LabgateError("unauthenticated", FAILURE_MESSAGES.bad_signature);
    if (result.kind === "device") return result;
    // Cached or not, a token acts as its account stands now: revoked, ended or cut at the next request.
    const current = await currentIdentity(ctx.store.query, gates.account, result);
    if (typeof current === "string") throw new LabgateError("unauthenticated", current);
    return current;
  }

  const middleware = (kind: Kind, scopes: readonly Scope[]): MiddlewareHandler<AppEnv> => {
    const check: MiddlewareHandler<AppEnv> = async (c, next) => {
      const identity = await authenticate(c, kind);
      // Set before the scope check: a refusal is recorded with who was refused (src/audit/audit.ts).
      c.set("identity", identity);
      if (scopes.length > 0 && (identity.kind !== "mgmt" || !grantsAny(identity.scopes, scopes))) throw new LabgateError("forbidden", MSG_SCOPE);
      await next();
    };
    requirements.set(check, kind === "mgmt" && scopes.length > 0 ? `mgmt: ${scopes.join(" or ")}` : kind);
    return check;
  };

  /**
   * For a GET route that runs something (the reference's `GET .../action/exec/{id}`), before its
   * auth check: the cross-site rule of the acting methods, and a HEAD is refused, never run.
   */
  const actsOnGetCheck: MiddlewareHandler<AppEnv> = async (c, next) => {
    if (c.req.method === "HEAD") {
      c.header("Allow", "GET");
      throw new LabgateError("method_not_allowed", "this route runs something: use GET");
    }
    refuseCrossSite(c, ctx.config.test_server.cors_origins);
    actsOnGet.add(c);
    await next();
  };

  return {
    authenticate,
    /** Marks a GET route that changes or runs something (see actsOnGetCheck); goes before its auth check. */
    actsOnGet: () => actsOnGetCheck,
    /** A management token; with scopes, one of them (admin scopes imply the rest, see scopes.ts). */
    management: (...anyOf: Scope[]) => middleware("mgmt", anyOf),
    /** A device token of a device that still exists. */
    device: () => middleware("device", []),
    /** Either kind of token (`any` in docs/routes.md). */
    any: () => middleware("any", []),
  };
}

export type Auth = ReturnType<typeof createAuth>;
