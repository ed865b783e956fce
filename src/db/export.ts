/**
 * A PostgreSQL database as an embedded image (a backup's database on either engine): the rows of
 * one REPEATABLE READ snapshot copied table by table into a fresh embedded database migrated to
 * the same steps, so that the archive is the one an embedded server writes and either engine
 * restores it. The reverse of `db copy` (./copy.ts), with its table walk.
 */
import type { Database as SqlJsDatabase, SqlJsStatic } from "sql.js";
import { sql, type Kysely } from "kysely";
import { rowsOf, tablesInOrder } from "./copy.ts";
import { freshImage } from "./image.ts";
import { SCHEMA_MIGRATIONS_TABLE, type Migration } from "./migrate.ts";
import type { ExportedImage, ImageReader } from "./store.ts";

type AnyTables = Kysely<Record<string, Record<string, unknown>>>;
type Value = string | number | Uint8Array | null;

/** A PostgreSQL value as the embedded database stores it. */
function embeddedValue(value: unknown): Value {
  if (value === null || value === undefined) return null;
  if (value instanceof Uint8Array) return new Uint8Array(value);
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "bigint") return Number(value);
  if (typeof value === "number" || typeof value === "string") return value;
  return String(value);
}

/** Synchronous reads of an image in memory, as the embedded database answers them. */
export function imageReader(image: SqlJsDatabase): ImageReader {
  const all = <T>(query: string, params: unknown[] = []): T[] => {
    const stmt = image.prepare(query);
    try {
      stmt.bind(params.map(embeddedValue));
      const rows: T[] = [];
      while (stmt.step()) rows.push(stmt.getAsObject() as T);
      return rows;
    } finally {
      stmt.free();
    }
  };
  return { all, get: (query, params) => all<never>(query, params)[0] } as ImageReader;
}

export async function postgresImage<T>(db: AnyTables, migrations: Migration[], sqlJs: () => Promise<SqlJsStatic>, alongside: (image: ImageReader) => T): Promise<ExportedImage<T>> {
  const SQL = await sqlJs();
  const image = freshImage(SQL);
  try {
    // One snapshot of every table; nothing is written, so no serialization failure can end it.
    await db
      .transaction()
      .setIsolationLevel("repeatable read")
      .setAccessMode("read only")
      .execute(async (tx) => {
        const applied = (await sql<{ version: number; name: string; applied_at: string }>`SELECT version, name, applied_at FROM schema_migrations ORDER BY version`.execute(tx)).rows;
        const unknown = applied.filter((a) => !migrations.some((m) => m.version === Number(a.version)));
        if (unknown.length > 0) throw new Error(`the database has schema steps this labgate does not know (${unknown.map((a) => a.version).join(", ")}); use a newer labgate binary`);
        image.run(SCHEMA_MIGRATIONS_TABLE);
        for (const step of applied) {
          for (const statement of migrations.find((m) => m.version === Number(step.version))!.sql) image.run(statement);
          image.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", [Number(step.version), step.name, step.applied_at]);
        }
        // Parents come first, but a table may name its own rows (in any order): checked at the end.
        image.run("PRAGMA foreign_keys = OFF");
        for (const table of tablesInOrder(image)) await copyTable(tx, image, table);
        image.run("PRAGMA foreign_keys = ON");
        const broken = rowsOf(image, "PRAGMA foreign_key_check");
        if (broken.length > 0) throw new Error(`the copied rows break a foreign key (${JSON.stringify(broken[0])})`);
      });
    const result = alongside(imageReader(image));
    return { image: image.export(), durable: Promise.resolve(), alongside: result };
  } finally {
    image.close();
  }
}

/** Replaces `table`'s rows in `image` (those its migrations seeded too) by PostgreSQL's, counted, and carries its ids' sequence over. */
async function copyTable(tx: AnyTables, image: SqlJsDatabase, table: string): Promise<void> {
  const columns = rowsOf(image, `SELECT name FROM pragma_table_info('${table}')`).map((r) => String(r.name));
  image.run(`DELETE FROM "${table}"`);
  const rows = (await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(table)}`.execute(tx)).rows;
  const insert = image.prepare(`INSERT INTO "${table}" (${columns.map((c) => `"${c}"`).join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`);
  try {
    for (const row of rows) insert.run(columns.map((column) => embeddedValue(row[column])));
  } finally {
    insert.free();
  }
  const counted = Number(rowsOf(image, `SELECT count(*) AS n FROM "${table}"`)[0].n);
  if (counted !== rows.length) throw new Error(`${table}: ${rows.length} rows read, ${counted} in the image`);
  // AUTOINCREMENT never gives an id again, nor does PostgreSQL's identity: the image goes on after the highest PostgreSQL gave.
  const identity = await sql<{ column: string }>`SELECT column_name AS column FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ${table} AND is_identity = 'YES'`.execute(tx);
  for (const { column } of identity.rows) {
    const last = (await sql<{ n: number | null }>`SELECT pg_sequence_last_value(pg_get_serial_sequence(${table}, ${column}))::bigint AS n`.execute(tx)).rows[0]?.n;
    if (!last) continue;
    image.run("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", [Number(last), table]);
    if (image.getRowsModified() === 0) image.run("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", [table, Number(last)]);
  }
}
