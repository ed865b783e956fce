/**
 * A test's own reads and writes of a server's database, on either engine: plain SQL with `?`
 * placeholders (numbered for PostgreSQL here), through the server's Store, so that a test that
 * sets up or checks rows directly runs the same on the embedded engine and on PostgreSQL.
 */
import { CompiledQuery } from "kysely";
import type { Store, Tx } from "../../src/db/store.ts";

export interface TestDb {
  get<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T | undefined>;
  all<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  /** Runs statements in one transaction; `run` answers the rows changed (and RETURNING rows). */
  write<T>(fn: (tx: TestTx) => Promise<T>): Promise<T>;
  /** One statement in a transaction of its own. */
  run(text: string, params?: unknown[]): Promise<{ changes: number; rows: Record<string, unknown>[] }>;
}

export interface TestTx {
  run(text: string, params?: unknown[]): Promise<{ changes: number; rows: Record<string, unknown>[] }>;
  get<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T | undefined>;
}

/** `?` outside quotes as PostgreSQL's `$1, $2, ...`. */
function numbered(text: string): string {
  let n = 0;
  let quote: string | undefined;
  let out = "";
  for (const ch of text) {
    if (quote) {
      if (ch === quote) quote = undefined;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if (ch === "?") {
      out += `$${++n}`;
      continue;
    }
    out += ch;
  }
  return out;
}

export function testDb(store: Store): TestDb {
  const compile = (text: string, params: unknown[]) => CompiledQuery.raw(store.engine === "postgres" ? numbered(text) : text, params);
  const on = (q: Store["query"] | Tx) => ({
    async all<T>(text: string, params: unknown[] = []) {
      return (await q.executeQuery<T>(compile(text, params))).rows;
    },
    async run(text: string, params: unknown[] = []) {
      const result = await q.executeQuery<Record<string, unknown>>(compile(text, params));
      return { changes: Number(result.numAffectedRows ?? 0), rows: result.rows };
    },
  });
  const top = on(store.query);
  return {
    all: top.all,
    get: async (text, params) => (await top.all<never>(text, params))[0],
    run: (text, params) => store.transact(async (tx) => on(tx).run(text, params)),
    write: (fn) =>
      store.transact(async (tx) => {
        const inner = on(tx);
        return fn({ run: inner.run, get: async (text, params) => (await inner.all<never>(text, params))[0] });
      }),
  };
}
