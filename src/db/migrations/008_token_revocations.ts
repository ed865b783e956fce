import type { Migration } from "../migrate.ts";

/*
 * Management token revocation.
 *
 *   revoked_tokens(jti, revoked, expires)      -- one token, by its id (the `jti` claim)
 *   revoked_users(user_id, before_ms, revoked) -- every token of a user issued at or before before_ms
 *
 * `before_ms` is UNIX milliseconds (tokens carry `iat` to the millisecond); `expires` is the
 * token's `exp` when known (the row is useless after it), else NULL. User names compare ignoring
 * case, as account names do. Times are ISO 8601 UTC.
 */
export const m008TokenRevocations: Migration = {
  version: 8,
  name: "token revocations",
  sql: [
    "CREATE TABLE revoked_tokens (jti TEXT NOT NULL PRIMARY KEY, revoked TEXT NOT NULL, expires INTEGER)",
    "CREATE TABLE revoked_users (user_id TEXT NOT NULL PRIMARY KEY COLLATE NOCASE, before_ms INTEGER NOT NULL, revoked TEXT NOT NULL)",
  ],
};
