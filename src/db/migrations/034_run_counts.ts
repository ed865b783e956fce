import type { Migration } from "../migrate.ts";

/*
 * Each run's cases by status, kept when it ends, so that the runs list shows them without reading
 * every report (src/testrun/runs/store.ts):
 *
 *   testrun_runs.passed / failed / skipped  -- its report's rows with that status, on the gateway or
 *                                              summed over its devices; NULL for a run that ended
 *                                              before this column, or without a report (aborted
 *                                              while pending, a runner error)
 */
export const m034RunCounts: Migration = {
  version: 34,
  name: "run_counts",
  sql: [`ALTER TABLE testrun_runs ADD COLUMN passed INTEGER`, `ALTER TABLE testrun_runs ADD COLUMN failed INTEGER`, `ALTER TABLE testrun_runs ADD COLUMN skipped INTEGER`],
};
