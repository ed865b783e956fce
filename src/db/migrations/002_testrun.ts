import type { Migration } from "../migrate.ts";

/**
 * Test runs and triggers (records live in the database). Times are
 * milliseconds since the epoch, passed in as parameters (journal replay must be deterministic).
 * `seq` gives creation order and Variant B's integer ids (never reused: AUTOINCREMENT).
 */
export const m002Testrun: Migration = {
  version: 2,
  name: "testrun",
  sql: [
    `CREATE TABLE testrun_triggers (
       seq INTEGER PRIMARY KEY AUTOINCREMENT,
       id TEXT NOT NULL UNIQUE,
       created_at INTEGER NOT NULL,
       config_name TEXT NOT NULL,
       test_suite_name TEXT NOT NULL,
       orchestrated INTEGER NOT NULL DEFAULT 0,
       status TEXT NOT NULL,
       is_aborted INTEGER NOT NULL DEFAULT 0,
       error TEXT,
       nodes TEXT NOT NULL DEFAULT '{}',
       remote_runs TEXT NOT NULL DEFAULT '[]',
       finished_at INTEGER,
       results_dir TEXT
     )`,
    `CREATE TABLE testrun_runs (
       seq INTEGER PRIMARY KEY AUTOINCREMENT,
       id TEXT NOT NULL UNIQUE,
       trigger_id TEXT NOT NULL,
       config_name TEXT NOT NULL,
       test_suite_name TEXT NOT NULL,
       machine_target TEXT,
       overrides TEXT,
       pattern TEXT NOT NULL DEFAULT '',
       repeat_of TEXT,
       status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'finished', 'failed', 'aborted')),
       created_at INTEGER NOT NULL,
       started_at INTEGER,
       finished_at INTEGER,
       metadata TEXT NOT NULL DEFAULT '{}',
       error TEXT,
       warnings TEXT NOT NULL DEFAULT '[]',
       abort_requested INTEGER NOT NULL DEFAULT 0,
       plan TEXT NOT NULL
     )`,
    `CREATE INDEX testrun_runs_trigger ON testrun_runs (trigger_id)`,
    `CREATE INDEX testrun_runs_status ON testrun_runs (status)`,
  ],
};
