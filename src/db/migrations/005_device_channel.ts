import type { Migration } from "../migrate.ts";

/*
 * Device channel: the remote-action log.
 *
 *   action_log(seq, id UNIQUE, mac_address, action_id, created, status, status_code, output_key, finished)
 *
 * `seq` orders the queue (oldest first) independently of clock resolution; `id` is the UUID the
 * API and the device see (the execution id). `status` is pending | sent | success | error;
 * `status_code` the device's exit code once known. `output_key` names the stored output under
 * DATA_DIR/multipart/ (null: no output). Rows are keyed by MAC like the reference; the device
 * deletion hook removes them. Times are ISO 8601 UTC strings.
 */
export const m005DeviceChannel: Migration = {
  version: 5,
  name: "device_channel",
  sql: [
    `CREATE TABLE action_log (
       seq INTEGER PRIMARY KEY AUTOINCREMENT,
       id TEXT NOT NULL UNIQUE,
       mac_address TEXT NOT NULL,
       action_id TEXT NOT NULL,
       created TEXT NOT NULL,
       status TEXT NOT NULL,
       status_code INTEGER,
       output_key TEXT,
       finished TEXT
     )`,
    `CREATE INDEX action_log_mac ON action_log(mac_address, status)`,
  ],
};
