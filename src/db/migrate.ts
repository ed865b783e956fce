import type { Database } from "./database.ts";
import { isoTime } from "../util/time.ts";

export interface Migration {
  version: number;
  name: string;
  /** DDL and deterministic DML only: it is journaled and replayed like any other write. */
  sql: string[];
  /**
   * The step on PostgreSQL where `sql` is not what PostgreSQL takes after the type rewrite of
   * src/db/query/postgres-schema.ts: its statements whole (SQLite's trigger bodies), or a rewrite
   * of each statement after the type rewrite.
   */
  postgres?: string[] | ((statement: string) => string);
}

/** The data dir was written by a newer labgate; this binary must not touch it. */
export class SchemaTooNewError extends Error {}

/** The table of applied steps, as the first migration makes it (also in an image made from PostgreSQL). */
export const SCHEMA_MIGRATIONS_TABLE = `CREATE TABLE schema_migrations (
  version INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  applied_at TEXT NOT NULL
)`;

/** Whether the database holds a table of that name (an older image may lack a newer table). */
export function hasTable(db: Pick<Database, "get">, name: string): boolean {
  return db.get("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = ?", [name]) !== undefined;
}

/** Applies the pending migrations, each in its own durable transaction. Returns the versions applied. */
export async function migrate(db: Database, steps: Migration[], now: () => Date = () => new Date()): Promise<number[]> {
  // Journaled only on the first start, not as an empty-effect frame on every start.
  if (!hasTable(db, "schema_migrations")) {
    await db.write((tx) => void tx.run(SCHEMA_MIGRATIONS_TABLE));
  }
  const current = db.get<{ v: number | null }>("SELECT MAX(version) AS v FROM schema_migrations")?.v ?? 0;
  const newest = steps.reduce((max, m) => Math.max(max, m.version), 0);
  if (current > newest) {
    throw new SchemaTooNewError(
      `the data dir holds schema version ${current}, but this labgate only knows up to ${newest}; use a newer labgate binary`,
    );
  }
  // By version, not by "above the highest": numbers are reserved per branch, so a lower one may
  // land after a higher one was applied (010 before 007), and must still run.
  const done = new Set(db.all<{ version: number }>("SELECT version FROM schema_migrations").map((r) => r.version));
  const applied: number[] = [];
  for (const step of [...steps].sort((a, b) => a.version - b.version)) {
    if (done.has(step.version)) continue;
    await db.write((tx) => {
      for (const statement of step.sql) tx.run(statement);
      tx.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", [step.version, step.name, isoTime(now())]);
    });
    applied.push(step.version);
  }
  return applied;
}

export function schemaVersion(db: Database): number {
  return db.get<{ v: number | null }>("SELECT MAX(version) AS v FROM schema_migrations")?.v ?? 0;
}
