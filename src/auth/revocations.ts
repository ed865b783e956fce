/*
 * Management token revocation. Every management token carries an id (`jti`)
 * and its issue time (`iat_ms`, to the millisecond). An admin revokes one token by id, or every token
 * of a user issued until now (disabling an account does the latter). Both live in the database
 * (migration 008), so `labgate token revoke` works with the server stopped too; the auth check
 * asks `isRevoked` (through currentIdentity, src/auth/authority.ts) on every request, verified-token
 * cache or not, so a revocation takes effect on the next request and ends long-lived connections.
 */
import type { Queries, Store, Tx } from "../db/store.ts";
import { recordAudit, type Actor } from "../audit/audit.ts";
import { epochSeconds, isoTime } from "../util/time.ts";
import type { ManagementIdentity } from "./tokens.ts";

export const MSG_REVOKED = "token has been revoked";
export const MSG_EXPIRED = "token has expired";

/**
 * Revokes one token by its id (idempotent). `expires` (its `exp`, when known) lets the row go
 * once the token has expired anyway; rows of expired tokens are dropped here.
 */
export async function revokeTokenId(tx: Tx, jti: string, expires: number | null, now: Date): Promise<void> {
  await tx.deleteFrom("revoked_tokens").where("expires", "is not", null).where("expires", "<", epochSeconds(now)).execute();
  await tx
    .insertInto("revoked_tokens")
    .values({ jti, revoked: isoTime(now), expires })
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** Revokes every token of `user` issued until `now` (tokens issued later are good; a later bound already stored stays). */
export async function revokeUserTokens(tx: Tx, user: string, now: Date): Promise<void> {
  await tx
    .insertInto("revoked_users")
    .values({ user_id: user, before_ms: now.getTime(), revoked: isoTime(now) })
    .onConflict((oc) =>
      oc.column("user_id").doUpdateSet((eb) => ({
        before_ms: eb.case().when("excluded.before_ms", ">", eb.ref("revoked_users.before_ms")).then(eb.ref("excluded.before_ms")).else(eb.ref("revoked_users.before_ms")).end(),
        revoked: eb.ref("excluded.revoked"),
      })),
    )
    .execute();
}

/** Revokes one token by id or every token of a user issued until now (the API and `labgate token revoke`), recorded in the audit log. */
export async function revokeTokens(store: Store, which: { id?: string; user?: string }, actor: Actor): Promise<void> {
  await store.transact(async (tx) => {
    if (which.id !== undefined) await revokeTokenId(tx, which.id, null, actor.at);
    else await revokeUserTokens(tx, which.user!, actor.at);
    await recordAudit(tx, actor, "token.revoke", which.id !== undefined ? `token:${which.id}` : `user:${which.user}`);
  });
}

/** Is this (verified) token revoked? Two indexed lookups: management requests are not the hot path. */
export async function isRevoked(q: Queries, identity: ManagementIdentity): Promise<boolean> {
  if (identity.jti !== undefined && (await q.selectFrom("revoked_tokens").select("jti").where("jti", "=", identity.jti).executeTakeFirst())) return true;
  const row = await q.selectFrom("revoked_users").select("before_ms").where("user_id", "=", identity.user).executeTakeFirst();
  return row !== undefined && identity.issuedAtMs <= row.before_ms;
}
