import type { Migration } from "../migrate.ts";

/*
 * The order pending registrations first asked in, as a column both engines have (it was SQLite's
 * rowid, which an upsert keeps):
 *
 *   registrations.seq  -- one more than the largest when a registration is first stored; asking
 *                         again keeps it (src/update/registration/authorize.ts)
 */
export const m031RegistrationOrder: Migration = {
  version: 31,
  name: "registration_order",
  sql: [
    `ALTER TABLE registrations ADD COLUMN seq INTEGER NOT NULL DEFAULT 0`,
    `UPDATE registrations SET seq = rowid`,
    `CREATE INDEX registrations_seq ON registrations(seq)`,
  ],
  // PostgreSQL has no rowid: rows already there are numbered in the order they last appeared.
  postgres: (statement) =>
    statement.replace(
      "UPDATE registrations SET seq = rowid",
      `UPDATE registrations r SET seq = o.n FROM (SELECT mac_address, key_fingerprint, row_number() OVER (ORDER BY last_appeared, mac_address, key_fingerprint) AS n FROM registrations) o
       WHERE o.mac_address = r.mac_address AND o.key_fingerprint = r.key_fingerprint`,
    ),
};
