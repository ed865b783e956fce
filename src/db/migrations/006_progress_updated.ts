import type { Migration } from "../migrate.ts";

/*
 * Update progress records expire after an idle time: `updated` is the time of the record's update check or of the device's latest
 * progress report. Existing records count from their `created`.
 */
export const m006ProgressUpdated: Migration = {
  version: 6,
  name: "progress_updated",
  sql: [`ALTER TABLE progress ADD COLUMN updated TEXT`, `UPDATE progress SET updated = created`],
};
