import { Hono, type Context } from "hono";
import { actorOf, recordAudit, type Actor } from "../audit/audit.ts";
import { getCookie, setCookie } from "hono/cookie";
import { z } from "zod";
import { SESSION_COOKIE, sameOrigin, MSG_CROSS_SITE, type Auth } from "../auth/middleware.ts";
import type { ManagementIdentity } from "../auth/tokens.ts";
import { parseScopeNames } from "../auth/scopes.ts";
import { revokeTokenId, revokeTokens } from "../auth/revocations.ts";
import type { AccessWatch } from "../auth/authority.ts";
import { LabgateError } from "../util/errors.ts";
import { jsonBody, jsonObject } from "../http/openapi.ts";
import { managementBody } from "../http/system.ts";
import { clientAddress, isTls } from "../http/transport.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import {
  accountName,
  accountPassword,
  checkLogin,
  createAccount,
  deleteAccount,
  getAccount,
  listAccounts,
  NAME_PATTERN,
  updateAccount,
} from "./accounts.ts";
import type { LoginThrottle } from "./throttle.ts";
import { dateOf } from "../util/time.ts";

export const MSG_LOGIN_FAILED = "invalid username or password";
export const MSG_THROTTLED = "too many failed logins, try again later";

const loginString = (key: string) => z.string({ error: `${key}: expected a string` }).max(1024, { error: `${key}: at most 1024 characters` });
export const loginBody = z.strictObject({ username: loginString("username"), password: loginString("password") }, jsonObject);
const scopeList = z.array(z.string(), { error: "scopes: expected a list of scope names" }).max(64, { error: "scopes: too many" });
export const newUserBody = z.strictObject({ name: accountName, password: accountPassword, scopes: scopeList }, jsonObject);
export const userChangeBody = z.strictObject(
  { password: accountPassword.optional(), scopes: scopeList.optional(), disabled: z.boolean({ error: "disabled: expected true or false" }).optional() },
  jsonObject,
);

const REVOKE_ERROR = 'give exactly one of "id" (a token id, as GET /api/whoami shows it) and "user"';
export const revokeBody = z
  .strictObject(
    {
      id: z.string({ error: "id: expected a string" }).min(1, { error: "id: expected a token id" }).max(128, { error: "id: at most 128 characters" }).optional(),
      user: z.string({ error: "user: expected a string" }).min(1, { error: "user: expected a name" }).max(256, { error: "user: at most 256 characters" }).optional(),
    },
    jsonObject,
  )
  .refine((b) => (b.id === undefined) !== (b.user === undefined), { error: REVOKE_ERROR });

/** Sets the session cookie (`""` with maxAge 0 clears it); Secure when served over TLS. */
const sessionCookie = (c: Context, value: string, maxAge: number) =>
  setCookie(c, SESSION_COOKIE, value, { httpOnly: true, sameSite: "Strict", path: "/", maxAge, secure: isTls(c) });

/** Console sign-in and sign-out, and the accounts. */
export function accountsRoutes(ctx: AppContext, auth: Auth, throttle: LoginThrottle, accessWatch: AccessWatch): Hono<AppEnv> {
  const { db } = ctx;
  const prefix = ctx.config.prefix;
  const app = new Hono<AppEnv>();

  const scopesOf = (names: readonly string[]) => {
    const scopes = parseScopeNames(prefix, names);
    if (typeof scopes === "string") throw new LabgateError("invalid", `scopes: ${scopes}`);
    return scopes;
  };

  // A page of another site must not sign the browser in (to an account of its choosing) or out.
  const refuseCrossSite = (c: Context) => {
    if ((c.req.header("origin") ?? c.req.header("referer")) !== undefined && !sameOrigin(c)) throw new LabgateError("forbidden", MSG_CROSS_SITE);
  };

  app.post("/api/v1/auth/login", async (c) => {
    const body = await jsonBody(c, loginBody);
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
    const account = await checkLogin(db, key, body.password, dateOf(ctx.clock), actorOf(c, ctx.clock));
    if (!account) {
      const actor = { ...actorOf(c, ctx.clock), name: body.username.slice(0, 64) };
      await db.write((tx) => recordAudit(tx, actor, "login.failure", `user:${actor.name}`, undefined, "refused"));
      const hold = throttle.failed(key, address);
      if (hold > 0) await ctx.clock.sleep(hold);
      throw new LabgateError("unauthenticated", MSG_LOGIN_FAILED);
    }
    throttle.succeeded(key, address);
    const ttl = ctx.config.console.session_ttl;
    const token = ctx.tokens.issueManagement(account.name, account.scopes, ttl, { session: account.sessionEpoch });
    sessionCookie(c, token, ttl);
    return c.json(managementBody(prefix, ctx.tokens.verifyManagement(token) as ManagementIdentity));
  });

  // Signing out ends the session on the server too: its token id is revoked.
  app.post("/api/v1/auth/logout", async (c) => {
    refuseCrossSite(c);
    const token = getCookie(c, SESSION_COOKIE);
    const identity = token ? ctx.tokens.verifyManagement(token) : undefined;
    if (typeof identity === "object" && identity.jti !== undefined) {
      const { jti, expiresAt } = identity;
      const actor: Actor = { ...actorOf(c, ctx.clock), kind: "account", name: identity.user, tokenId: jti };
      await db.write((tx) => {
        revokeTokenId(tx, jti, expiresAt, dateOf(ctx.clock));
        recordAudit(tx, actor, "logout", `user:${identity.user}`);
      });
      accessWatch.sweep();
    }
    sessionCookie(c, "", 0);
    return c.body(null, 204);
  });

  // Token revocation: one token by id, or every token of a user issued until now.
  app.post("/api/v1/tokens/revoke", auth.management("admin_rw"), async (c) => {
    const { id, user } = await jsonBody(c, revokeBody);
    await revokeTokens(db, { id, user }, actorOf(c, ctx.clock));
    accessWatch.sweep();
    return c.json({});
  });

  app.get("/api/v1/users", auth.management("admin_ro"), (c) => c.json(listAccounts(db, prefix)));

  app.post("/api/v1/users", auth.management("admin_rw"), async (c) => {
    const body = await jsonBody(c, newUserBody);
    const account = await createAccount(db, prefix, body.name, body.password, scopesOf(body.scopes), { now: dateOf(ctx.clock), actor: actorOf(c, ctx.clock) });
    return c.json(account, 201);
  });

  app.patch("/api/v1/users/:name", auth.management("admin_rw"), async (c) => {
    const name = c.req.param("name");
    const body = await jsonBody(c, userChangeBody);
    if (!getAccount(db, prefix, name)) throw new LabgateError("not_found", `account ${name} does not exist`);
    const change = { password: body.password, disabled: body.disabled, scopes: body.scopes && scopesOf(body.scopes) };
    const updated = await updateAccount(db, prefix, name, change, dateOf(ctx.clock), actorOf(c, ctx.clock));
    accessWatch.sweep();
    return c.json(updated);
  });

  app.delete("/api/v1/users/:name", auth.management("admin_rw"), async (c) => {
    await deleteAccount(db, c.req.param("name"), dateOf(ctx.clock), actorOf(c, ctx.clock));
    accessWatch.sweep();
    return c.body(null, 204);
  });

  return app;
}
