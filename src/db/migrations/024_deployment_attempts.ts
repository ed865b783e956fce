import type { Migration } from "../migrate.ts";

/*
 * Attempts and their retries (src/update/deployments/, docs/update-server.md, "Retries"):
 *
 *   deployments.retries                -- attempts after a failed one: a device fails for good after retries + 1
 *   deployments.retry_backoff          -- seconds before the first retry; each further one waits twice as long
 *   deployment_devices.attempt         -- the offers made to the device in this deployment: the number an
 *                                         offer carries and its outcome answers (0: never offered)
 *   deployment_devices.failures        -- its failed attempts since it started (or a person asked for a retry)
 *   deployment_devices.offered_version -- the package version offered in the current attempt
 *   deployment_devices.retry_at        -- when a device `retrying` may be offered again (ISO)
 *   update_history.attempt, .output    -- the attempt a row answers, and the install output of a failure
 */
export const m024DeploymentAttempts: Migration = {
  version: 24,
  name: "deployment_attempts",
  sql: [
    `ALTER TABLE deployments ADD COLUMN retries INTEGER NOT NULL DEFAULT 2`,
    `ALTER TABLE deployments ADD COLUMN retry_backoff REAL NOT NULL DEFAULT 300`,
    `ALTER TABLE deployment_devices ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0`,
    `ALTER TABLE deployment_devices ADD COLUMN failures INTEGER NOT NULL DEFAULT 0`,
    `ALTER TABLE deployment_devices ADD COLUMN offered_version TEXT`,
    `ALTER TABLE deployment_devices ADD COLUMN retry_at TEXT`,
    `ALTER TABLE update_history ADD COLUMN attempt INTEGER`,
    `ALTER TABLE update_history ADD COLUMN output TEXT`,
  ],
};
