/**
 * `labgate db copy`: a stopped embedded database into an empty PostgreSQL database, whole or not
 * at all (one PostgreSQL transaction), rows counted on both sides, the embedded files left as
 * they were (read from the image and journals, nothing written back).
 */
import type { Database as SqlJsDatabase } from "sql.js";
import { sql, type Kysely } from "kysely";
import { openImage, replayJournals } from "./image.ts";
import { loadSqlJs } from "./wasm.ts";
import type { Migration } from "./migrate.ts";
import { migratePostgres } from "./query/postgres-schema.ts";
import { postgresQueryLayer } from "./query/postgres.ts";

export class CopyRefused extends Error {}

export interface CopiedTable {
  table: string;
  rows: number;
}

/** The embedded database's state as the last commit left it, in memory only. */
async function readEmbedded(dataDir: string, warn: (message: string) => void): Promise<SqlJsDatabase> {
  const { SQL } = await loadSqlJs();
  const { sql: db, generation, exists } = openImage(SQL, dataDir);
  replayJournals(db, dataDir, generation, Infinity, warn);
  if (!exists && db.exec("SELECT 1 FROM sqlite_master WHERE name = 'schema_migrations'").length === 0) {
    db.close();
    throw new CopyRefused(`${dataDir} holds no labgate database`);
  }
  return db;
}

export const rowsOf = (db: SqlJsDatabase, query: string): Array<Record<string, unknown>> => {
  const stmt = db.prepare(query);
  const rows: Array<Record<string, unknown>> = [];
  while (stmt.step()) rows.push(stmt.getAsObject());
  stmt.free();
  return rows;
};

/** Tables to copy, parents before the tables whose foreign keys name them. */
export function tablesInOrder(db: SqlJsDatabase): string[] {
  const names = rowsOf(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT IN ('_labgate_meta', 'schema_migrations') ORDER BY name").map((r) => String(r.name));
  const parents = new Map(names.map((name) => [name, rowsOf(db, `SELECT "table" AS parent FROM pragma_foreign_key_list('${name}')`).map((r) => String(r.parent)).filter((p) => p !== name)]));
  const ordered: string[] = [];
  const visit = (name: string) => {
    if (ordered.includes(name)) return;
    for (const parent of parents.get(name) ?? []) visit(parent);
    ordered.push(name);
  };
  names.forEach(visit);
  return ordered;
}

/** Rows per INSERT: well under PostgreSQL's 65,535 parameters for the widest table. */
const BATCH = 500;

export async function copyToPostgres(options: { dataDir: string; url: string; migrations: Migration[]; warn?: (message: string) => void; progress?: (table: CopiedTable) => void }): Promise<CopiedTable[]> {
  const warn = options.warn ?? (() => {});
  const source = await readEmbedded(options.dataDir, warn);
  let target: Kysely<Record<string, Record<string, unknown>>> | undefined;
  try {
    const versions = rowsOf(source, "SELECT version FROM schema_migrations").map((r) => Number(r.version));
    const unknown = versions.filter((v) => !options.migrations.some((m) => m.version === v));
    if (unknown.length > 0) throw new CopyRefused(`the embedded database has schema steps this labgate does not know (${unknown.join(", ")}); use a newer labgate binary`);
    target = await postgresQueryLayer(options.url, { max: 1 });
    const db = target;
    const existing = await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()`.execute(db);
    if (existing.rows.length > 0) throw new CopyRefused(`the PostgreSQL database is not empty (it has ${existing.rows.length} tables, e.g. ${existing.rows[0].name}); copy into an empty one`);
    // The schema the embedded database has, no further: the next start migrates both engines alike.
    await migratePostgres(db, options.migrations.filter((m) => versions.includes(m.version)));
    const tables = tablesInOrder(source);
    return await db.transaction().execute(async (tx) => {
      const copied: CopiedTable[] = [];
      for (const table of tables) {
        // Rows the migrations seeded (the access generation's counter) give way to the copied ones.
        await sql`DELETE FROM ${sql.table(table)}`.execute(tx);
        const stmt = source.prepare(`SELECT * FROM "${table}"`);
        let batch: Array<Record<string, unknown>> = [];
        let rows = 0;
        const flush = async () => {
          if (batch.length === 0) return;
          await tx.insertInto(table).values(batch).execute();
          rows += batch.length;
          batch = [];
        };
        while (stmt.step()) {
          const row = stmt.getAsObject();
          batch.push(Object.fromEntries(Object.entries(row).map(([column, value]) => [column, value instanceof Uint8Array ? Buffer.from(value) : value])));
          if (batch.length >= BATCH) await flush();
        }
        stmt.free();
        await flush();
        const counted = Number((await sql<{ n: string }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(tx)).rows[0].n);
        if (counted !== rows) throw new Error(`${table}: ${rows} rows read, ${counted} in PostgreSQL`);
        await continueIds(tx, source, table);
        const entry = { table, rows };
        options.progress?.(entry);
        copied.push(entry);
      }
      return copied;
    });
  } finally {
    source.close();
    await target?.destroy();
  }
}

/** An identity column goes on after the highest id SQLite ever gave (AUTOINCREMENT never reuses one, nor does PostgreSQL). */
async function continueIds(tx: Kysely<Record<string, Record<string, unknown>>>, source: SqlJsDatabase, table: string): Promise<void> {
  const identity = await sql<{ column: string }>`SELECT column_name AS column FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ${table} AND is_identity = 'YES'`.execute(tx);
  for (const { column } of identity.rows) {
    const used = rowsOf(source, `SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = '${table}'), 0), coalesce((SELECT max("${column}") FROM "${table}"), 0)) AS n`)[0].n;
    if (Number(used) > 0) await sql`SELECT setval(pg_get_serial_sequence(${table}, ${column}), ${Number(used)})`.execute(tx);
  }
}
