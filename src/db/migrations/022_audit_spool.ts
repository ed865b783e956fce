import type { Migration } from "../migrate.ts";

/*
 * Audit entries from commands run beside the server (src/audit/spool.ts): each carries the id it
 * was written to the spool file with, so that one moved into the log twice (the server stopped
 * between its commit and the removal of the file) is kept once.
 */
export const m022AuditSpool: Migration = {
  version: 22,
  name: "audit_spool",
  sql: [`ALTER TABLE audit_log ADD COLUMN spool_id TEXT`, `CREATE UNIQUE INDEX audit_log_spool ON audit_log(spool_id) WHERE spool_id IS NOT NULL`],
};
