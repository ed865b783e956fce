import type { Migration } from "../migrate.ts";

/*
 * A board's deployment attempt under way (src/lab/spans.ts), kept so that a restart neither loses
 * the start of its console span nor forgets that `recover` cycled the board already:
 *
 *   lab_open_spans  -- one row per board with an attempt under way: the attempt, where its console
 *                      was when it was offered (NULL: the board has no console port), and when
 *                      `recover` power-cycled it (NULL: not yet); gone with the attempt's outcome
 *   lab_console_spans  -- + deployment_id, attempt: the attempt a span belongs to, so that a
 *                         deployment's page shows its devices' spans (NULL on older rows)
 */
export const m032LabSpanState: Migration = {
  version: 32,
  name: "lab_span_state",
  sql: [
    `CREATE TABLE lab_open_spans (
       device_id INTEGER PRIMARY KEY REFERENCES devices(id) ON DELETE CASCADE,
       deployment_id INTEGER NOT NULL,
       attempt INTEGER NOT NULL,
       start INTEGER,
       recovered TEXT
     )`,
    `ALTER TABLE lab_console_spans ADD COLUMN deployment_id INTEGER`,
    `ALTER TABLE lab_console_spans ADD COLUMN attempt INTEGER`,
    `CREATE INDEX lab_console_spans_deployment ON lab_console_spans(deployment_id, device_id)`,
  ],
};
