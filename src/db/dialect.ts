/**
 * The few SQL forms that differ between the embedded engine (SQLite) and PostgreSQL, as Kysely
 * expressions, so that an owning module writes each query once.
 */
import { DummyDriver, Kysely, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler, sql, type Expression, type RawBuilder } from "kysely";
import type { Engine } from "./store.ts";

/** A key of a JSON-object text column (device and package metadata) as text, NULL when absent. */
export function metadataText(engine: Engine, column: string, key: string): RawBuilder<string | null> {
  if (engine === "postgres") return sql<string | null>`(${sql.ref(column)}::jsonb ->> ${key})`;
  return sql<string | null>`json_extract(${sql.ref(column)}, ${`$."${key.replace(/"/g, '\\"')}"`})`;
}

/** `value LIKE pattern` ignoring case on both engines (SQLite's LIKE does, PostgreSQL's does not); `\` escapes. */
export function likeIgnoringCase(value: RawBuilder<unknown>, pattern: string): RawBuilder<boolean> {
  return sql<boolean>`lower(${value}) LIKE lower(${pattern}) ESCAPE '\\'`;
}

/** Compiles only (for embeddedSql): the embedded engine's SQL, no connection. */
const sqliteCompiler = new Kysely<unknown>({
  dialect: {
    createAdapter: () => new SqliteAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (db) => new SqliteIntrospector(db),
    createQueryCompiler: () => new SqliteQueryCompiler(),
  },
});

/**
 * A condition as the embedded engine's SQL text and `?` parameters, for the queries still written
 * as text for the synchronous database (removed once every area queries through the Store).
 */
export function embeddedSql(condition: Expression<unknown>): { sql: string; params: (string | number)[] } {
  const compiled = sql`${condition}`.compile(sqliteCompiler);
  return { sql: compiled.sql, params: compiled.parameters as (string | number)[] };
}
