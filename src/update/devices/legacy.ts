/*
 * Device reads for the areas whose queries are still synchronous (their `db.write` transactions,
 * their synchronous helpers): the builders of devices.ts compiled for the embedded engine and run
 * on the synchronous database. This file goes once no area calls them so.
 */
import { DummyDriver, Kysely, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler, sql, type Compilable, type Expression } from "kysely";
import type { Tx as SyncTx } from "../../db/index.ts";
import { bindable } from "../../db/query/embedded.ts";
import type { Tables } from "../../db/schema.ts";
import type { SqlFilter } from "../permissions/permissions.ts";

/** The synchronous database, or one of its transactions. */
export type SyncReads = Pick<SyncTx, "all">;

/** Builds and compiles only (no connection): the embedded engine's SQL. */
export const compiler = new Kysely<Tables>({
  dialect: {
    createAdapter: () => new SqliteAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (db) => new SqliteIntrospector(db),
    createQueryCompiler: () => new SqliteQueryCompiler(),
  },
});

export const isSync = (source: object): source is SyncReads => typeof (source as Partial<SyncReads>).all === "function";

/** The rows of a query built on `compiler`, read synchronously. */
export function rowsSync<T>(db: SyncReads, query: Compilable<T>): T[] {
  const { sql: text, parameters } = query.compile();
  return db.all<T>(text, bindable(parameters));
}

/** A condition as SQL text with `?` parameters (what the synchronous queries combine). */
export function filterText(condition: Expression<unknown>): SqlFilter {
  const { sql: text, parameters } = sql`${condition}`.compile(compiler);
  return { sql: text, params: parameters as (string | number)[] };
}
