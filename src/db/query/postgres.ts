/**
 * Kysely over PostgreSQL through pg's pool. Both are imported only here, and this module only
 * when `database.url` names a PostgreSQL database: the embedded default never loads them.
 */
import type { Kysely } from "kysely";

/** pg's type ids whose text form labgate reads as a number: int8 (counts, ids) and numeric (sums, averages), as SQLite answers them. */
const NUMBERS = new Set([20, 1700]);

export async function postgresQueryLayer<Tables>(url: string, { max = 10 }: { max?: number } = {}): Promise<Kysely<Tables>> {
  const [{ default: pg }, { Kysely, PostgresDialect }] = await Promise.all([import("pg"), import("kysely")]);
  // Per pool, not pg's global parsers: ids and counts stay numbers, as on the embedded engine.
  const types = {
    getTypeParser: ((id: number, format?: "text" | "binary") => (NUMBERS.has(id) ? (value: string) => Number(value) : pg.types.getTypeParser(id, format as "text"))) as typeof pg.types.getTypeParser,
  };
  const pool = new pg.Pool({ connectionString: url, max, types });
  // An idle client's error (the server restarted) must not crash the process: the pool drops it.
  pool.on("error", () => {});
  return new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
}
