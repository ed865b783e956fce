import type { Migration } from "../migrate.ts";

/*
 * Device logs bounded in bytes:
 *
 *   device_logs.bytes  -- UTF-8 bytes of the entry's name and text, what the per-device quota counts
 *
 * Rows from before get theirs computed here. The index serves the newest-first listing page by
 * page (device timestamp, then id) without sorting every entry of a group for each page.
 */
export const m015DeviceLogBytes: Migration = {
  version: 15,
  name: "device_log_bytes",
  sql: [
    "ALTER TABLE device_logs ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0",
    "UPDATE device_logs SET bytes = length(CAST(name AS BLOB)) + length(CAST(entry AS BLOB))",
    "CREATE INDEX device_logs_time ON device_logs(device_timestamp, id)",
  ],
  postgres: [
    "ALTER TABLE device_logs ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0",
    "UPDATE device_logs SET bytes = octet_length(name) + octet_length(entry)",
    "CREATE INDEX device_logs_time ON device_logs(device_timestamp, id)",
  ],
};
