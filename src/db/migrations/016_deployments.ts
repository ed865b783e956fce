import type { Migration } from "../migrate.ts";

/*
 * Deployments (src/update/deployments/): a version rolled out to a v2 group in phases.
 *
 *   deployments(id, group_id, version, status, pause_reason, phases, current_phase, phase_started,
 *               success_percent, success_wait, error_percent, device_timeout, start_at, window,
 *               created, created_by, started, finished, updated)
 *     status: scheduled | running | paused | completed | aborted
 *     phases: JSON list of each phase's device count (cumulative counts are recorded, not percents)
 *     current_phase: index of the last started phase, -1 before the first one starts
 *     phase_started: JSON list of ISO times, one per started phase
 *     window: JSON {days, from, to, timezone} or NULL (always open)
 *   deployment_devices(deployment_id, device_id, phase, position, state, progress, from_version,
 *                      to_version, reason, output, offered_at, updated)
 *     one row per device of the group when the deployment was created; `position` is the stable
 *     recorded order, `phase` the phase it belongs to; `state` one of the states in model.ts
 *
 * Deleting a group (only possible once it has no devices) deletes its deployments; a deleted
 * device's rows go. Update history keeps its rows (deployment_id becomes NULL).
 */
export const m016Deployments: Migration = {
  version: 16,
  name: "deployments",
  sql: [
    `CREATE TABLE deployments (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
       version TEXT NOT NULL,
       status TEXT NOT NULL,
       pause_reason TEXT,
       phases TEXT NOT NULL,
       current_phase INTEGER NOT NULL DEFAULT -1,
       phase_started TEXT NOT NULL DEFAULT '[]',
       success_percent REAL,
       success_wait INTEGER,
       error_percent REAL,
       device_timeout INTEGER NOT NULL,
       start_at TEXT,
       window TEXT,
       created TEXT NOT NULL,
       created_by TEXT,
       started TEXT,
       finished TEXT,
       updated TEXT NOT NULL
     )`,
    `CREATE INDEX deployments_group ON deployments(group_id, status)`,
    `CREATE INDEX deployments_status ON deployments(status)`,
    `CREATE TABLE deployment_devices (
       deployment_id INTEGER NOT NULL REFERENCES deployments(id) ON DELETE CASCADE,
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       phase INTEGER NOT NULL,
       position INTEGER NOT NULL,
       state TEXT NOT NULL,
       progress INTEGER,
       from_version TEXT,
       to_version TEXT,
       reason TEXT,
       output TEXT,
       offered_at TEXT,
       updated TEXT NOT NULL,
       PRIMARY KEY (deployment_id, device_id)
     )`,
    `CREATE INDEX deployment_devices_state ON deployment_devices(deployment_id, state, position)`,
    `CREATE INDEX deployment_devices_device ON deployment_devices(device_id)`,
  ],
  // WINDOW is a reserved word in PostgreSQL: the column is quoted there (Kysely quotes every name).
  postgres: (statement) => statement.replace(/^(\s*)window TEXT,$/m, '$1"window" TEXT,'),
};
