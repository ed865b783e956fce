import { Hono, type Context } from "hono";
import { recordAudit, type Actor } from "../audit/audit.ts";
import { actorOf } from "../http/actor.ts";
import { MAX_REQUEST_TEXT } from "../audit/refusals.ts";
import { getCookie, setCookie } from "hono/cookie";
import { SESSION_COOKIE, sameOrigin, MSG_CROSS_SITE, type Auth } from "../auth/middleware.ts";
import type { ManagementIdentity } from "../auth/tokens.ts";
import { parseScopeNames } from "../auth/scopes.ts";
import { revokeTokenId, revokeTokens } from "../auth/revocations.ts";
import type { AccessWatch } from "../auth/authority.ts";
import { LabgateError } from "../util/errors.ts";
import { Empty, ErrorBody, errors, route, routes } from "../http/openapi.ts";
import * as z from "zod";
import { Caller } from "../http/schema.ts";
import { managementBody } from "../http/system.ts";
import { clientAddress, isTls } from "../http/transport.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { checkLogin, createAccount, deleteAccount, getAccount, listAccounts, updateAccount } from "./accounts.ts";
import { Account, AccountUpdate, LoginBody, NAME_PATTERN, NewAccount, RevokeBody } from "./schema.ts";
import type { LoginThrottle } from "./throttle.ts";
import { dateOf } from "../util/time.ts";
import { deletePermissionsOfUser } from "../update/permissions/permissions.ts";

export const MSG_LOGIN_FAILED = "invalid username or password";
export const MSG_THROTTLED = "too many failed logins, try again later";

const crossSite = { description: "Origin or Referer of another site", json: ErrorBody };

/** Sets the session cookie (`""` with maxAge 0 clears it); Secure when served over TLS. */
const sessionCookie = (c: Context, value: string, maxAge: number) =>
  setCookie(c, SESSION_COOKIE, value, { httpOnly: true, sameSite: "Strict", path: "/", maxAge, secure: isTls(c) });

/** Console sign-in and sign-out, and the accounts. */
export function accountsRoutes(ctx: AppContext, auth: Auth, throttle: LoginThrottle, accessWatch: AccessWatch) {
  const { store } = ctx;
  const prefix = ctx.config.prefix;
  const app = new Hono<AppEnv>();
  const tag = "accounts";

  const scopesOf = (names: readonly string[]) => {
    const scopes = parseScopeNames(prefix, names);
    if (typeof scopes === "string") throw new LabgateError("invalid", `scopes: ${scopes}`);
    return scopes;
  };

  // A page of another site must not sign the browser in (to an account of its choosing) or out.
  const refuseCrossSite = (c: Context) => {
    if ((c.req.header("origin") ?? c.req.header("referer")) !== undefined && !sameOrigin(c)) throw new LabgateError("forbidden", MSG_CROSS_SITE);
  };

  const postAuthLogin = route(
    app,
    {
      method: "post",
      path: "/api/v1/auth/login",
      tag,
      access: "public",
      summary: "Console sign-in: sets the labgate_session cookie (HttpOnly, SameSite=Strict, Secure over TLS) to a session token",
      body: { json: LoginBody },
      responses: {
        200: {
          description: "Signed in (the body is what GET /api/whoami answers)",
          json: Caller,
          headers: { "Set-Cookie": "labgate_session=<token>; Max-Age=<console.session_ttl>; Path=/; HttpOnly; SameSite=Strict (; Secure over TLS)" },
        },
        400: errors[400],
        401: { description: "Unknown name, wrong password or disabled account (one answer for all)", json: ErrorBody },
        403: crossSite,
        429: { description: "Too many failed logins for this name or from this address", json: ErrorBody, headers: { "Retry-After": "seconds to wait" } },
      },
    },
    async (c, { body }) => {
      refuseCrossSite(c);
      // Names that cannot exist share one key: they cannot grow the throttle's memory either.
      const key = NAME_PATTERN.test(body.username) ? body.username : "";
      const address = clientAddress(c);
      const wait = throttle.retryAfter(key, address);
      if (wait > 0) {
        c.header("Retry-After", String(wait));
        throw new LabgateError("too_many", MSG_THROTTLED);
      }
      throttle.attempt(key, address);
      // Every name costs the same password check, one that cannot exist too.
      const account = await checkLogin(store, key, body.password, dateOf(ctx.clock), actorOf(c, ctx.clock));
      if (!account) {
        // Nobody is known: the name tried is what the attempt was at, cut as every text from a request is.
        const tried = body.username.slice(0, MAX_REQUEST_TEXT);
        await recordAudit(store.query, actorOf(c, ctx.clock), "login.failure", `user:${tried}`, { tried }, "refused");
        const hold = throttle.failed(key, address);
        if (hold > 0) await ctx.clock.sleep(hold);
        throw new LabgateError("unauthenticated", MSG_LOGIN_FAILED);
      }
      throttle.succeeded(key, address);
      const ttl = ctx.config.console.session_ttl;
      const token = ctx.tokens.issueManagement(account.name, account.scopes, ttl, { session: account.sessionEpoch });
      sessionCookie(c, token, ttl);
      return c.json(managementBody(prefix, ctx.tokens.verifyManagement(token) as ManagementIdentity));
    },
  );

  // Signing out ends the session on the server too: its token id is revoked.
  const postAuthLogout = route(
    app,
    {
      method: "post",
      path: "/api/v1/auth/logout",
      tag,
      access: "public",
      summary: "Console sign-out: clears the session cookie and revokes its token",
      responses: { 204: { description: "Cookie cleared", headers: { "Set-Cookie": "labgate_session=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict" } }, 403: crossSite },
    },
    async (c) => {
      refuseCrossSite(c);
      const token = getCookie(c, SESSION_COOKIE);
      const identity = token ? ctx.tokens.verifyManagement(token) : undefined;
      if (typeof identity === "object" && identity.jti !== undefined) {
        const { jti, expiresAt } = identity;
        const actor: Actor = { ...actorOf(c, ctx.clock), kind: "account", name: identity.user, tokenId: jti };
        await store.transact(async (tx) => {
          await revokeTokenId(tx, jti, expiresAt, dateOf(ctx.clock));
          await recordAudit(tx, actor, "logout", `user:${identity.user}`);
        });
        await accessWatch.sweep();
      }
      sessionCookie(c, "", 0);
      return c.body(null, 204);
    },
  );

  // Token revocation: one token by id, or every token of a user issued until now.
  const postTokensRevoke = route(
    app,
    {
      method: "post",
      path: "/api/v1/tokens/revoke",
      tag,
      access: "management",
      summary: "Revokes a management token by id, or every token of a user issued until now (admin_rw); effective on the next request, open streams and shells end",
      body: { json: RevokeBody },
      responses: { 200: { description: "Revoked", json: Empty }, 400: errors[400], 401: errors[401], 403: errors[403] },
    },
    auth.management("admin_rw"),
    async (c, { body: { id, user } }) => {
      await revokeTokens(store, { id, user }, actorOf(c, ctx.clock));
      await accessWatch.sweep();
      return c.json({});
    },
  );

  const getUsers = route(
    app,
    { method: "get", path: "/api/v1/users", tag, access: "management", summary: "Console accounts (admin_ro)", responses: { 200: { description: "By name", json: z.array(Account) }, 401: errors[401], 403: errors[403] } },
    auth.management("admin_ro"),
    async (c) => c.json(await listAccounts(store.query, prefix)),
  );

  const postUsers = route(
    app,
    {
      method: "post",
      path: "/api/v1/users",
      tag,
      access: "management",
      summary: "Creates a console account (admin_rw)",
      body: { json: NewAccount },
      responses: { 201: { description: "Created", json: Account }, 400: errors[400], 401: errors[401], 403: errors[403], 409: errors[409] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const account = await createAccount(store, prefix, body.name, body.password, scopesOf(body.scopes), { now: dateOf(ctx.clock), actor: actorOf(c, ctx.clock) });
      return c.json(account, 201);
    },
  );

  const patchUsersByName = route(
    app,
    {
      method: "patch",
      path: "/api/v1/users/:name",
      tag,
      access: "management",
      summary:
        "Changes an account's password, scopes or disabled flag (admin_rw); disabling or a new password ends its sessions, disabling revokes its tokens; its sessions and tokens act with the new scopes from the next request on",
      body: { json: AccountUpdate },
      responses: {
        200: { description: "Changed", json: Account },
        400: errors[400],
        401: errors[401],
        403: errors[403],
        404: errors[404],
        409: { description: "Would disable yourself or leave no enabled account with admin_rw", json: ErrorBody },
      },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const name = c.req.param("name") ?? "";
      if (!(await getAccount(store.query, prefix, name))) throw new LabgateError("not_found", `account ${name} does not exist`);
      const change = { password: body.password, disabled: body.disabled, scopes: body.scopes && scopesOf(body.scopes) };
      const updated = await updateAccount(store, prefix, name, change, dateOf(ctx.clock), actorOf(c, ctx.clock));
      await accessWatch.sweep();
      return c.json(updated);
    },
  );

  const deleteUsersByName = route(
    app,
    {
      method: "delete",
      path: "/api/v1/users/:name",
      tag,
      access: "management",
      summary: "Deletes an account (admin_rw): its sessions end, its tokens are revoked, its per-user permissions go",
      responses: {
        204: { description: "Deleted" },
        401: errors[401],
        403: errors[403],
        404: errors[404],
        409: { description: "Would delete yourself or leave no enabled account with admin_rw", json: ErrorBody },
      },
    },
    auth.management("admin_rw"),
    async (c) => {
      await deleteAccount(store, c.req.param("name") ?? "", dateOf(ctx.clock), actorOf(c, ctx.clock), deletePermissionsOfUser);
      await accessWatch.sweep();
      return c.body(null, 204);
    },
  );

  return routes(app, postAuthLogin, postAuthLogout, postTokensRevoke, getUsers, postUsers, patchUsersByName, deleteUsersByName);
}
