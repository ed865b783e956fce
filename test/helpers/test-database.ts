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

/** The database of the data dir `dataDir` (made now, empty, the first time); undefined on the embedded engine. */
export async function databaseUrlFor(dataDir: string): Promise<string | undefined> {
  const cluster = testPostgresUrl();
  if (!cluster) return undefined;
  const known = databases.get(resolve(dataDir));
  if (known) return known.url;
  const name = `t${process.pid}_${randomBytes(6).toString("hex")}`;
  await onCluster(`CREATE DATABASE "${name}"`);
  const url = new URL(cluster);
  url.pathname = `/${name}`;
  const made = { name, url: url.href };
  databases.set(resolve(dataDir), made);
  return made.url;
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
  const url = args[0] === "serve" || args[0] === "restore" ? await databaseUrlFor(args[at + 1]) : knownDatabaseUrl(args[at + 1]);
  return url ? { ...env, LABGATE_DATABASE_URL: url } : env;
}
