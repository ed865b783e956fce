import type { Migration } from "../migrate.ts";

/*
 * The access generation: one counter that every change to who may do what counts up.
 *
 *   access_generation(n)  -- one row
 *
 * Triggers count it up on a change to accounts (scopes, password, enabled, session epoch, the
 * row itself), to token revocations, to permission rows, and to what permission rows reach: a
 * device's name, MAC address and tags, group membership of devices and packages. Long-lived
 * connections (event streams, shells) and cached views of what a user may see compare it with
 * the value they were built at (src/auth/authority.ts), so that a change is seen wherever it was
 * made: by any route, by `labgate user`, by a replay of the journal.
 */
const counted = (table: string, event: string, when = "") =>
  `CREATE TRIGGER access_${table}_${event.split(" ")[0].toLowerCase()} AFTER ${event} ON ${table}${when ? ` WHEN ${when}` : ""}
     BEGIN UPDATE access_generation SET n = n + 1; END`;

/** PostgreSQL's form: one trigger function, a statement trigger per insert/delete, row triggers where a change must be told apart. */
const countedOnPostgres = (table: string, event: string, when = "") =>
  `CREATE TRIGGER access_${table}_${event.toLowerCase()} AFTER ${event} ON ${table} ${when ? `FOR EACH ROW WHEN (${when.replace(/ IS NOT /g, " IS DISTINCT FROM ")})` : "FOR EACH STATEMENT"} EXECUTE FUNCTION access_generation_count()`;

const COUNTED = ["accounts", "permissions", "devices", "device_tags", "group_devices", "group_packages", "revoked_tokens", "revoked_users"];
const ACCOUNT_CHANGE = "OLD.scopes IS NOT NEW.scopes OR OLD.disabled IS NOT NEW.disabled OR OLD.session_epoch IS NOT NEW.session_epoch OR OLD.password_hash IS NOT NEW.password_hash";
const DEVICE_CHANGE = "OLD.name IS NOT NEW.name OR OLD.mac_address IS NOT NEW.mac_address";

export const m014AccessGeneration: Migration = {
  version: 14,
  name: "access_generation",
  sql: [
    "CREATE TABLE access_generation (n INTEGER NOT NULL)",
    "INSERT INTO access_generation (n) VALUES (0)",
    ...COUNTED.flatMap((table) => [counted(table, "INSERT"), counted(table, "DELETE")]),
    counted("accounts", "UPDATE", ACCOUNT_CHANGE),
    counted("permissions", "UPDATE"),
    counted("devices", "UPDATE", DEVICE_CHANGE),
    counted("revoked_users", "UPDATE"),
  ],
  postgres: [
    "CREATE TABLE access_generation (n BIGINT NOT NULL)",
    "INSERT INTO access_generation (n) VALUES (0)",
    `CREATE FUNCTION access_generation_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE access_generation SET n = n + 1; RETURN NULL; END $$`,
    ...COUNTED.flatMap((table) => [countedOnPostgres(table, "INSERT"), countedOnPostgres(table, "DELETE")]),
    countedOnPostgres("accounts", "UPDATE", ACCOUNT_CHANGE),
    countedOnPostgres("permissions", "UPDATE"),
    countedOnPostgres("devices", "UPDATE", DEVICE_CHANGE),
    countedOnPostgres("revoked_users", "UPDATE"),
  ],
};
