/**
 * The few SQL forms that differ between the embedded engine (SQLite) and PostgreSQL, as Kysely
 * expressions, so that an owning module writes each query once.
 */
import { sql, type RawBuilder } from "kysely";
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

/** A bound byte string as a value of a VALUES list (PostgreSQL types an untyped parameter there as text). */
export function bytesValue(engine: Engine, value: Uint8Array | null): RawBuilder<Uint8Array | null> {
  return engine === "postgres" ? sql<Uint8Array | null>`CAST(${value} AS bytea)` : sql<Uint8Array | null>`${value}`;
}
