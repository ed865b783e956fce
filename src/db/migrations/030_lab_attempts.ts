import type { Migration } from "../migrate.ts";

/*
 * The board lab joined with deployments (src/lab/spans.ts, docs/lab.md):
 *
 *   lab_console_spans      -- what a board's console printed during one update attempt (from the
 *                             offer to the outcome and the boot after it), attached to the attempt's
 *                             history row; it goes with the row (history trimmed) and the device
 *   deployments.recover    -- JSON {power_cycle_after_minutes}: a board silent that long after its
 *                             install is power-cycled once; NULL: no recovery
 */
export const m030LabAttempts: Migration = {
  version: 30,
  name: "lab_attempts",
  sql: [
    `CREATE TABLE lab_console_spans (
       history_id INTEGER PRIMARY KEY REFERENCES update_history(id) ON DELETE CASCADE,
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       start INTEGER NOT NULL,
       "end" INTEGER NOT NULL,
       bytes BLOB NOT NULL,
       at TEXT NOT NULL
     )`,
    `CREATE INDEX lab_console_spans_device ON lab_console_spans(device_id, history_id)`,
    `ALTER TABLE deployments ADD COLUMN recover TEXT`,
  ],
};
