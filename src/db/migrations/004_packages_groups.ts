import type { Migration } from "../migrate.ts";

/*
 * Update server, part 1: packages, groups and their assignments, update progress.
 *
 * Table names other domains rely on (the permission test walks group membership):
 *   packages(id, created, sha256, driver, metadata, storage_dir, storage_name, size, version, devtype, created_by)
 *   groups(id, created, metadata, policy, priority, created_by)
 *   group_devices(group_id, device_id)     -- a device's groups; device rows go -> memberships go
 *   group_packages(group_id, package_id)   -- a group's packages; a package in a group cannot be deleted
 *   progress(device_id, mac_address, created, version, progress)  -- one record per updating device
 *
 * Foreign keys: group_devices.device_id and progress.device_id reference devices(id) of migration
 * 003 with ON DELETE CASCADE, so deleting a device removes its memberships and progress record.
 * group_packages.package_id has no cascade: the delete-package 409 rule is enforced by it too.
 * Times are ISO 8601 UTC strings; ids are AUTOINCREMENT so they are never reused.
 */
export const m004PackagesGroups: Migration = {
  version: 4,
  name: "packages_groups",
  sql: [
    `CREATE TABLE packages (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       created TEXT NOT NULL,
       sha256 TEXT NOT NULL,
       driver TEXT NOT NULL,
       metadata TEXT NOT NULL,
       storage_dir TEXT NOT NULL,
       storage_name TEXT NOT NULL UNIQUE,
       size INTEGER NOT NULL,
       version TEXT NOT NULL,
       devtype TEXT NOT NULL,
       created_by TEXT
     )`,
    `CREATE TABLE groups (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       created TEXT NOT NULL,
       metadata TEXT NOT NULL,
       policy TEXT NOT NULL DEFAULT 'no_update,',
       priority INTEGER NOT NULL DEFAULT 25,
       created_by TEXT
     )`,
    `CREATE TABLE group_devices (
       group_id INTEGER NOT NULL REFERENCES groups(id),
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       PRIMARY KEY (group_id, device_id)
     )`,
    `CREATE INDEX group_devices_device ON group_devices(device_id)`,
    `CREATE TABLE group_packages (
       group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
       package_id INTEGER NOT NULL REFERENCES packages(id),
       PRIMARY KEY (group_id, package_id)
     )`,
    `CREATE INDEX group_packages_package ON group_packages(package_id)`,
    `CREATE TABLE progress (
       device_id INTEGER PRIMARY KEY REFERENCES devices(id) ON DELETE CASCADE,
       mac_address TEXT NOT NULL,
       created TEXT NOT NULL,
       version TEXT NOT NULL,
       progress INTEGER NOT NULL DEFAULT 0
     )`,
  ],
};
