import type { Migration } from "../migrate.ts";

export const m001Core: Migration = {
  version: 1,
  name: "core",
  sql: [
    `CREATE TABLE settings (
       key TEXT PRIMARY KEY,
       value TEXT NOT NULL
     )`,
  ],
};
