import type { Migration } from "../migrate.ts";

/*
 * Device logs: telemetry entries devices send in batches.
 *
 *   device_logs(id, device_id, created, device_timestamp, name, entry)
 *
 * Times are ISO 8601 UTC strings, so text order is time order (the `since`/`to` filters and
 * newest-first listing compare them as text). Rows go with their device (cascade). The index
 * serves the per-device listing and the cap that drops a device's oldest entries.
 */
export const m010DeviceLogs: Migration = {
  version: 10,
  name: "device_logs",
  sql: [
    `CREATE TABLE device_logs (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       created TEXT NOT NULL,
       device_timestamp TEXT NOT NULL,
       name TEXT NOT NULL,
       entry TEXT NOT NULL
     )`,
    `CREATE INDEX device_logs_device ON device_logs(device_id, id)`,
  ],
};
