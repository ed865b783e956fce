import type { Migration } from "../migrate.ts";

/*
 * Update server, part 0: devices, tags, pending registrations, per-user permissions.
 *
 * Table names other domains rely on:
 *   devices(id, created, name, mac_address UNIQUE, public_key, key_fingerprint, capabilities, metadata, last_access)
 *   device_tags(device_id, tag)            -- ON DELETE CASCADE from devices
 *   registrations(mac_address, key_fingerprint, public_key, metadata, last_appeared)  -- pending requests
 *   permissions(id, created, user_id, resource, resource_id, resource_name, permission)
 *
 * Keys are compared by `key_fingerprint` (SHA-256 of the SPKI DER), never by their PEM text.
 * Times are ISO 8601 UTC strings; ids are AUTOINCREMENT so they are never reused (a deleted
 * device that registers again gets a new id, so its old tokens, which carry the id, stay dead).
 * JSON columns (capabilities, metadata) hold JSON object text.
 */
export const m003Devices: Migration = {
  version: 3,
  name: "devices",
  sql: [
    `CREATE TABLE devices (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       created TEXT NOT NULL,
       name TEXT NOT NULL,
       mac_address TEXT NOT NULL UNIQUE,
       public_key TEXT,
       key_fingerprint TEXT,
       capabilities TEXT NOT NULL DEFAULT '{}',
       metadata TEXT NOT NULL DEFAULT '{}',
       last_access TEXT
     )`,
    `CREATE INDEX devices_name ON devices(name)`,
    `CREATE TABLE device_tags (
       device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
       tag TEXT NOT NULL,
       PRIMARY KEY (device_id, tag)
     )`,
    `CREATE INDEX device_tags_tag ON device_tags(tag)`,
    `CREATE TABLE registrations (
       mac_address TEXT NOT NULL,
       key_fingerprint TEXT NOT NULL,
       public_key TEXT NOT NULL,
       metadata TEXT NOT NULL,
       last_appeared TEXT NOT NULL,
       PRIMARY KEY (mac_address, key_fingerprint)
     )`,
    `CREATE TABLE permissions (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       created TEXT NOT NULL,
       user_id TEXT NOT NULL,
       resource TEXT NOT NULL,
       resource_id INTEGER,
       resource_name TEXT,
       permission TEXT NOT NULL,
       CHECK ((resource_id IS NULL) <> (resource_name IS NULL))
     )`,
    `CREATE UNIQUE INDEX permissions_unique ON permissions(user_id, resource, permission, coalesce(resource_id, resource_name))`,
    `CREATE INDEX permissions_user ON permissions(user_id, permission, resource)`,
    `CREATE INDEX permissions_resource ON permissions(resource, resource_id)`,
  ],
  // PostgreSQL's coalesce takes one type: an id or a name, as text.
  postgres: (statement) => statement.replace("coalesce(resource_id, resource_name)", "coalesce(resource_id::text, resource_name)"),
};
