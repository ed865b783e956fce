import type { Migration } from "../migrate.ts";

/*
 * A delta the gateway made, found by an index instead of reading every package's metadata on each
 * update check that offers a package (src/update/packages/packages.ts `deltaOf`):
 *
 *   packages.delta_target        -- the package a delta rebuilds (its `<prefix>.delta.target`),
 *                                   NULL for a full package
 *   packages.delta_base_version  -- the version a delta applies to (its
 *                                   `requires:<prefix>.software.version`), NULL for a full package
 *
 * The migration does not know the configured prefix: it fills the columns of the packages whose
 * metadata has one key ending in `.delta.target` with a package id, as only the gateway writes it.
 */
const deltaKey = `key LIKE '%.delta.target'`;
const baseKey = `key LIKE 'requires:%.software.version'`;

export const m037PackageDeltas: Migration = {
  version: 37,
  name: "package_deltas",
  sql: [
    `ALTER TABLE packages ADD COLUMN delta_target INTEGER`,
    `ALTER TABLE packages ADD COLUMN delta_base_version TEXT`,
    `UPDATE packages SET
       delta_target = (SELECT CAST(value AS INTEGER) FROM json_each(packages.metadata) WHERE ${deltaKey} AND value GLOB '[0-9]*' AND NOT value GLOB '*[^0-9]*' LIMIT 1),
       delta_base_version = (SELECT value FROM json_each(packages.metadata) WHERE ${baseKey} LIMIT 1)
     WHERE metadata LIKE '%.delta.target"%'`,
    `UPDATE packages SET delta_base_version = NULL WHERE delta_target IS NULL`,
    `CREATE INDEX packages_delta ON packages(delta_target, delta_base_version)`,
  ],
  postgres: [
    `ALTER TABLE packages ADD COLUMN delta_target BIGINT`,
    `ALTER TABLE packages ADD COLUMN delta_base_version TEXT`,
    `UPDATE packages SET
       delta_target = (SELECT value::bigint FROM json_each_text(packages.metadata::json) WHERE ${deltaKey} AND value ~ '^[0-9]+$' LIMIT 1),
       delta_base_version = (SELECT value FROM json_each_text(packages.metadata::json) WHERE ${baseKey} LIMIT 1)
     WHERE metadata LIKE '%.delta.target"%'`,
    `UPDATE packages SET delta_base_version = NULL WHERE delta_target IS NULL`,
    `CREATE INDEX packages_delta ON packages(delta_target, delta_base_version)`,
  ],
};
