import type { Migration } from "../migrate.ts";

/*
 * A board's deployment attempt under way (src/lab/spans.ts), kept so that a restart neither loses
 * the start of its console span nor forgets that `recover` cycled the board already:
 *
 *   lab_open_spans  -- one row per board with an attempt under way: the attempt, where its console
 *                      was when it was offered (NULL: the board has no console port), and when
 *                      `recover` power-cycled it (NULL: not yet); gone with the attempt's outcome
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
  ],
};
