/**
 * The Store on PostgreSQL (`database.url`): pg's pool behind Kysely, SERIALIZABLE transactions run
 * again on conflicts, the numbered migrations applied at open. A query that cannot reach
 * PostgreSQL throws the caller's `unavailable` error (a 503 while serving), and the pool connects
 * again by itself once PostgreSQL is back.
 */
import { sql, type Kysely } from "kysely";
import type { SqlJsStatic } from "sql.js";
import { postgresImage } from "./export.ts";
import type { Migration } from "./migrate.ts";
import { refused, unreachable } from "./query/connection-errors.ts";
import { migratePostgres } from "./query/postgres-schema.ts";
import { postgresPool } from "./query/postgres.ts";
import { transact } from "./query/transaction.ts";
import type { Tables } from "./schema.ts";
import type { Store } from "./store.ts";
import { redactedText, redactedUrl } from "./url.ts";

export interface PostgresStoreOptions {
  url: string;
  migrations: Migration[];
  /** What a query throws when PostgreSQL cannot be reached (the main bundle's DatabaseUnavailableError). */
  unavailable: (message: string) => Error;
  /** What opening throws when the URL cannot be used (a ConfigError naming `database.url`: exit 2). */
  unusable: (message: string) => Error;
  log: (level: "info" | "warn" | "error", message: string) => void;
  /** The main bundle's sql.js, for a backup's embedded image (this bundle holds no copy of its own). */
  sqlJs: () => Promise<SqlJsStatic>;
}

export interface OpenedPostgres {
  store: Store;
  /** The migration steps this open applied. */
  applied: number[];
}

/** Connects (failing within the pool's connection timeout), migrates and returns the store. */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<OpenedPostgres> {
  const { url } = options;
  const { query, pool } = await postgresPool<Tables>(url, { unavailable: options.unavailable });
  // Writes that need no acknowledgement (last-seen times) commit without waiting for the disk, as
  // the embedded engine's go with its next commit: a few connections of their own.
  const lazy = await postgresPool<Tables>(url, { max: 2, unavailable: options.unavailable, lazyCommits: true });
  const said = (error: unknown) => redactedText((error as Error).message || String((error as { code?: unknown }).code), url);
  let applied: number[];
  try {
    await sql`SELECT 1`.execute(query);
    applied = await migratePostgres(query, options.migrations);
  } catch (error) {
    await query.destroy().catch(() => {});
    await lazy.query.destroy().catch(() => {});
    const code = (error as { code?: unknown }).code;
    if (unreachable(error) || refused(error) || code === "unavailable") throw options.unusable(`config key database.url: cannot use ${redactedUrl(url)}: ${said(error)}`);
    throw error;
  }
  let schemaVersion = Math.max(0, ...options.migrations.map((m) => m.version));
  const any = query as unknown as Kysely<Record<string, Record<string, unknown>>>;
  const store: Store = {
    engine: "postgres",
    query,
    transact: async (fn, options) => {
      const tables = options?.serialOn ?? [];
      // Taken before the first read: the transaction's snapshot begins once the writers before it committed.
      const lock = tables.length === 0 ? undefined : sql`LOCK TABLE ${sql.join(tables.map((name) => sql.table(name)))} IN SHARE ROW EXCLUSIVE MODE`;
      const result = await transact(query, async (tx) => {
        if (lock) await lock.execute(tx);
        return fn(tx);
      });
      options?.committed?.();
      return result;
    },
    writeLazy: (statement) => {
      lazy.query.executeQuery(statement.compile()).catch((error: unknown) => options.log("warn", `a write that needs no acknowledgement failed: ${said(error)}`));
    },
    // Nothing reloads a PostgreSQL database under the server: caches are dropped by their owners' writes.
    epoch: 0,
    status: async () => {
      const connections = { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount };
      try {
        const row = (await sql<{ v: number | null }>`SELECT max(version) AS v FROM schema_migrations`.execute(query)).rows[0];
        schemaVersion = Number(row?.v ?? 0);
        return { engine: "postgres", schema_version: schemaVersion, state: "ok", connections };
      } catch (error) {
        return { engine: "postgres", schema_version: schemaVersion, state: "failed", error: said(error), connections };
      }
    },
    exportImage: (alongside) => postgresImage(any, options.migrations, options.sqlJs, alongside),
    close: async () => {
      await query.destroy();
      await lazy.query.destroy();
    },
  };
  return { store, applied };
}
