import type { Migration } from "../migrate.ts";

/*
 * The refused rows of the audit log (auth.refused, login.failure) indexed apart: retention keeps
 * them within a budget of their own (audit.max_refusal_rows) by counting and dropping the oldest
 * of them through this index, whatever the size of the rest of the log.
 */
export const m028AuditRefusals: Migration = {
  version: 28,
  name: "audit_refusals",
  sql: [`CREATE INDEX audit_log_refused ON audit_log(id) WHERE outcome = 'refused'`],
};
