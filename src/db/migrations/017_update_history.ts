import type { Migration } from "../migrate.ts";

/*
 * Every device's update history (issue 26): one row per update outcome the device reported (or a
 * deployment decided: not reached, aborted), with or without a deployment.
 *
 *   update_history(id, device_id, deployment_id, from_version, to_version, outcome, reason, at)
 *     outcome: installed | failed | not_reached | aborted
 */
export const m017UpdateHistory: Migration = {
  version: 17,
  name: "update_history",
  sql: [
    `CREATE TABLE update_history (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       deployment_id INTEGER REFERENCES deployments(id) ON DELETE SET NULL,
       from_version TEXT,
       to_version TEXT NOT NULL,
       outcome TEXT NOT NULL,
       reason TEXT,
       at TEXT NOT NULL
     )`,
    `CREATE INDEX update_history_device ON update_history(device_id, id)`,
  ],
};
