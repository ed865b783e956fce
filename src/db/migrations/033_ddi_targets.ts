import type { Migration } from "../migrate.ts";

/*
 * hawkBit's Direct Device Integration (src/update/ddi/, docs/update-server.md):
 *
 *   ddi_targets    -- a device an administrator made a DDI target: its controller id (also the
 *                     device's mac_address) and the SHA-256 of its target token (NULL: revoked)
 *   ddi_actions    -- what one target was told to install: the offer (deployment, attempt,
 *                     package), open until the device closes it (success or failure) or
 *                     acknowledges its cancel
 *   ddi_artifacts  -- a package's SHA-1 and MD5, which DDI's artifacts name beside its SHA-256
 */
export const m033DdiTargets: Migration = {
  version: 33,
  name: "ddi_targets",
  sql: [
    `CREATE TABLE ddi_targets (
       controller_id TEXT PRIMARY KEY,
       device_id INTEGER NOT NULL UNIQUE REFERENCES devices(id) ON DELETE CASCADE,
       token_sha256 TEXT,
       created TEXT NOT NULL,
       token_set TEXT NOT NULL
     )`,
    `CREATE TABLE ddi_actions (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       deployment_id INTEGER,
       attempt INTEGER,
       package_id INTEGER NOT NULL,
       version TEXT NOT NULL,
       state TEXT NOT NULL,
       result TEXT,
       details TEXT,
       created TEXT NOT NULL,
       updated TEXT NOT NULL
     )`,
    `CREATE INDEX ddi_actions_device ON ddi_actions(device_id, state)`,
    `CREATE TABLE ddi_artifacts (
       package_id INTEGER PRIMARY KEY REFERENCES packages(id) ON DELETE CASCADE,
       sha1 TEXT NOT NULL,
       md5 TEXT NOT NULL
     )`,
  ],
};
