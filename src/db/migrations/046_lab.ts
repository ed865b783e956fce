import type { Migration } from "../migrate.ts";

/*
 * The board lab (src/lab/):
 *
 *   lab_power         -- a board's last power action that succeeded: what it left (state), who, when
 *   lab_reservations  -- who holds a board and until when (a row past `until` holds nothing)
 *
 * Both go with their device.
 */
export const m046Lab: Migration = {
  version: 46,
  name: "lab",
  sql: [
    `CREATE TABLE lab_power (
       device_id INTEGER PRIMARY KEY REFERENCES devices(id) ON DELETE CASCADE,
       state TEXT NOT NULL,
       action TEXT NOT NULL,
       actor TEXT NOT NULL,
       at TEXT NOT NULL
     )`,
    `CREATE TABLE lab_reservations (
       device_id INTEGER PRIMARY KEY REFERENCES devices(id) ON DELETE CASCADE,
       holder TEXT NOT NULL,
       note TEXT NOT NULL,
       since TEXT NOT NULL,
       until TEXT NOT NULL
     )`,
  ],
};
