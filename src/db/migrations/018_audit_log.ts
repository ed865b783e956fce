import type { Migration } from "../migrate.ts";

/*
 * The audit log: who changed what, when, from where (src/audit/audit.ts).
 *
 *   audit_log(id, time, actor_kind, actor, token_id, client, action, target, outcome, detail)
 *
 * `id` orders the rows (retention drops the lowest first); `time` is ISO 8601 UTC; `actor_kind`
 * account | token | device | system; `action` a stable dotted name (device.approve); `outcome`
 * ok | refused; `detail` a small JSON object or NULL. Written in the transaction of the change.
 */
export const m018AuditLog: Migration = {
  version: 18,
  name: "audit_log",
  sql: [
    `CREATE TABLE audit_log (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       time TEXT NOT NULL,
       actor_kind TEXT NOT NULL,
       actor TEXT NOT NULL,
       token_id TEXT,
       client TEXT NOT NULL,
       action TEXT NOT NULL,
       target TEXT NOT NULL,
       outcome TEXT NOT NULL,
       detail TEXT
     )`,
    `CREATE INDEX audit_log_time ON audit_log(time)`,
    `CREATE INDEX audit_log_target ON audit_log(target, id)`,
    `CREATE INDEX audit_log_actor ON audit_log(actor, id)`,
  ],
};
