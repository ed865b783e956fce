import type { Migration } from "../migrate.ts";

/*
 * Console accounts: who may sign in to the web console.
 *
 *   accounts(name, password_hash, scopes, disabled, created, last_login, session_epoch)
 *
 * `name` is unique ignoring case and is the `user` of per-user permissions and of the session's
 * token. `password_hash` is `scrypt$N$r$p$salt$hash` (src/accounts/passwords.ts). `scopes` are
 * scope names without the prefix, space-separated. A session token carries the account's
 * `session_epoch`; disabling the account or changing its password counts it up, which ends every
 * session issued before.
 * Times are ISO 8601 UTC.
 */
export const m009Accounts: Migration = {
  version: 9,
  name: "accounts",
  sql: [
    `CREATE TABLE accounts (
       name TEXT NOT NULL PRIMARY KEY COLLATE NOCASE,
       password_hash TEXT NOT NULL,
       scopes TEXT NOT NULL,
       disabled INTEGER NOT NULL DEFAULT 0,
       created TEXT NOT NULL,
       last_login TEXT,
       session_epoch INTEGER NOT NULL DEFAULT 0
     )`,
  ],
};
