import type { Migration } from "../migrate.ts";

/*
 * Bounds of the public registration route:
 *
 *   registrations.client_address  -- the peer address that last sent the registration
 *
 * Indexes serve the per-key and per-address limits and the expiry of pending rows.
 */
export const m011RegistrationBounds: Migration = {
  version: 11,
  name: "registration_bounds",
  sql: [
    `ALTER TABLE registrations ADD COLUMN client_address TEXT NOT NULL DEFAULT ''`,
    `CREATE INDEX registrations_key ON registrations(key_fingerprint)`,
    `CREATE INDEX registrations_address ON registrations(client_address)`,
    `CREATE INDEX registrations_appeared ON registrations(last_appeared)`,
  ],
};
