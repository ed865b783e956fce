import type { Migration } from "../migrate.ts";

/*
 * The board lab (src/lab/):
 *
 *   lab_power         -- a board's last power action that succeeded: what it left (state), who, when
 *   lab_reservations  -- who holds a board and until when (a row past `until` holds nothing)
 *   lab_boards        -- boards an administrator set through the API (`config`: the board as JSON),
 *                        keyed as the board map compares them (MAC addresses in lower case)
 *
 * Power and reservation rows go with their device; a board set through the API names a device
 * that may not exist yet.
 */
export const m029Lab: Migration = {
  version: 29,
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
    `CREATE TABLE lab_boards (
       key TEXT PRIMARY KEY,
       config TEXT NOT NULL,
       updated TEXT NOT NULL,
       actor TEXT NOT NULL
     )`,
  ],
};
