/*
 * Management token revocation. Every management token carries an id (`jti`)
 * and its issue time (`iat_ms`, to the millisecond). An admin revokes one token by id, or every token
 * of a user issued until now (disabling an account does the latter). Both live in the database
 * (migration 008), so `labgate token revoke` works with the server stopped too; the auth check
 * asks `isRevoked` (through currentIdentity, src/auth/authority.ts) on every request, verified-token
 * cache or not, so a revocation takes effect on the next request and ends long-lived connections.
 */
import type { Database, Tx } from "../db/index.ts";
import { recordAudit, type Actor } from "../audit/audit.ts";
import { epochSeconds, isoTime } from "../util/time.ts";
import type { ManagementIdentity } from "./tokens.ts";

export const MSG_REVOKED = "token has been revoked";
export const MSG_EXPIRED = "token has expired";

/**
 * Revokes one token by its id (idempotent). `expires` (its `exp`, when known) lets the row go
 * once the token has expired anyway; rows of expired tokens are dropped here.
 */
export function revokeTokenId(tx: Tx, jti: string, expires: number | null, now: Date): void {
  tx.run("DELETE FROM revoked_tokens WHERE expires IS NOT NULL AND expires < ?", [epochSeconds(now)]);
  tx.run("INSERT OR IGNORE INTO revoked_tokens (jti, revoked, expires) VALUES (?, ?, ?)", [jti, isoTime(now), expires]);
}

/** Revokes every token of `user` issued until `now` (tokens issued later are good). */
export function revokeUserTokens(tx: Tx, user: string, now: Date): void {
  tx.run(
    `INSERT INTO revoked_users (user_id, before_ms, revoked) VALUES (?, ?, ?)
     ON CONFLICT (user_id) DO UPDATE SET before_ms = max(before_ms, excluded.before_ms), revoked = excluded.revoked`,
    [user, now.getTime(), isoTime(now)],
  );
}

/** Revokes one token by id or every token of a user issued until now (the API and `labgate token revoke`), recorded in the audit log. */
export function revokeTokens(db: Database, which: { id?: string; user?: string }, actor: Actor): Promise<void> {
  return db.write((tx) => {
    if (which.id !== undefined) revokeTokenId(tx, which.id, null, actor.at);
    else revokeUserTokens(tx, which.user!, actor.at);
    recordAudit(tx, actor, "token.revoke", which.id !== undefined ? `token:${which.id}` : `user:${which.user}`);
  });
}

/** Is this (verified) token revoked? Two indexed lookups: management requests are not the hot path. */
export function isRevoked(db: Pick<Database, "get">, identity: ManagementIdentity): boolean {
  if (identity.jti !== undefined && db.get("SELECT 1 AS x FROM revoked_tokens WHERE jti = ?", [identity.jti])) return true;
  const row = db.get<{ before_ms: number }>("SELECT before_ms FROM revoked_users WHERE user_id = ?", [identity.user]);
  return row !== undefined && identity.issuedAtMs <= row.before_ms;
}
