import type { Migration } from "../migrate.ts";

/*
 * Test runs on managed devices (docs/device-tests.md, src/testrun/devices/):
 *
 *   testrun_runs.devices       -- JSON list of the run's devices and how far each got; NULL for other runs
 *   testrun_device_results     -- each case's result per device, for a config's history
 *     (run_seq, run_id, config_name, device_mac, device_name, test_name, status)
 *
 * A row of testrun_device_results goes with its run (deleted with the run's record).
 */
export const m020DeviceTestRuns: Migration = {
  version: 20,
  name: "device_test_runs",
  sql: [
    `ALTER TABLE testrun_runs ADD COLUMN devices TEXT`,
    `CREATE TABLE testrun_device_results (
       run_seq INTEGER NOT NULL,
       run_id TEXT NOT NULL,
       config_name TEXT NOT NULL,
       device_mac TEXT NOT NULL,
       device_name TEXT NOT NULL,
       test_name TEXT NOT NULL,
       status TEXT NOT NULL,
       PRIMARY KEY (run_seq, device_mac, test_name)
     )`,
    `CREATE INDEX testrun_device_results_config ON testrun_device_results (config_name, run_seq)`,
  ],
};
