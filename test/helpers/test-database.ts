/**
 * `LABGATE_TEST_DATABASE=postgres`: the whole suite on PostgreSQL. scripts/run-tests.mjs starts one
 * throwaway cluster for the run and passes its URL (LABGATE_TEST_POSTGRES_URL); every data dir a
 * test serves gets a fresh database of its own, made on its first start and kept across restarts
 * on the same data dir, dropped when the data dir is removed. The CLI commands a test runs on a
 * data dir (`--data-dir DIR`) are given that data dir's database.
 */
import { randomBytes } from "node:crypto";
import { resolve } from "node:path";

/** The cluster's URL (its `postgres` database) in the PostgreSQL test mode; undefined on the embedded engine. */
export const testPostgresUrl = (): string | undefined => (process.env.LABGATE_TEST_DATABASE === "postgres" ? process.env.LABGATE_TEST_POSTGRES_URL : undefined);

const databases = new Map<string, { name: string; url: string }>();

async function onCluster(statement: string): Promise<void> {
  const { default: pg } = await import("pg");
  const client = new pg.Client({ connectionString: testPostgresUrl() });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

const urlOf = (name: string): string => {
  const url = new URL(testPostgresUrl()!);
  url.pathname = `/${name}`;
  return url.href;
};

let template: Promise<string> | undefined;
/** A database migrated once per test process, copied for each served data dir (a copy is seconds cheaper than migrating). */
function migratedTemplate(): Promise<string> {
  template ??= (async () => {
    const name = `tpl${process.pid}_${randomBytes(6).toString("hex")}`;
    await onCluster(`CREATE DATABASE "${name}"`);
    const { openDatabase } = await import("../../src/db/open.ts");
    const opened = await openDatabase({ dataDir: "", url: urlOf(name), log: () => {} });
    await opened.close();
    return name;
  })();
  return template;
}

/**
 * The database of the data dir `dataDir` (made the first time: migrated for a server to serve, or
 * empty, as `restore` and the migration tests need it); undefined on the embedded engine.
 */
export async function databaseUrlFor(dataDir: string, made: "migrated" | "empty" = "empty"): Promise<string | undefined> {
  if (!testPostgresUrl()) return undefined;
  const known = databases.get(resolve(dataDir));
  if (known) return known.url;
  const name = `t${process.pid}_${randomBytes(6).toString("hex")}`;
  await onCluster(made === "migrated" ? `CREATE DATABASE "${name}" TEMPLATE "${await migratedTemplate()}"` : `CREATE DATABASE "${name}"`);
  const database = { name, url: urlOf(name) };
  databases.set(resolve(dataDir), database);
  return database.url;
}

/** The database a data dir already has (for a CLI command on it), if any. */
export const knownDatabaseUrl = (dataDir: string): string | undefined => databases.get(resolve(dataDir))?.url;

/** Drops the data dir's database (ending what is still connected); a no-op when it has none. */
export async function dropDatabaseFor(dataDir: string): Promise<void> {
  const known = databases.get(resolve(dataDir));
  if (!known) return;
  databases.delete(resolve(dataDir));
  await onCluster(`DROP DATABASE IF EXISTS "${known.name}" WITH (FORCE)`);
}

/**
 * `env` for `labgate ARGS` in a child process: LABGATE_DATABASE_URL set to the database of the data
 * dir named by `--data-dir` (made for `serve` and for `restore`'s new data dir, the one a server
 * there had for other commands), unless the test names a database itself (`LABGATE_DATABASE_URL: ""`:
 * the embedded engine).
 */
export async function cliDatabaseEnv(args: string[], env: Record<string, string> = {}): Promise<Record<string, string>> {
  if (!testPostgresUrl() || "LABGATE_DATABASE_URL" in env || args.includes("--database-url")) return env;
  const at = args.indexOf("--data-dir");
  if (at < 0 || at + 1 >= args.length) return env;
  const url = args[0] === "serve" ? await databaseUrlFor(args[at + 1], "migrated") : args[0] === "restore" ? await databaseUrlFor(args[at + 1]) : knownDatabaseUrl(args[at + 1]);
  return url ? { ...env, LABGATE_DATABASE_URL: url } : env;
}
