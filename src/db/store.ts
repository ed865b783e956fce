/**
 * The data layer the domains query: Kysely over either engine, typed by the schema's tables
 * (src/db/schema.ts), with one way to run a transaction and one to write what needs no
 * acknowledgement. The embedded engine is the default; PostgreSQL's store (src/db/query/postgres.ts)
 * is loaded only when `database.url` names one.
 */
import { Kysely, type Compilable, type Transaction } from "kysely";
import type { Database } from "./database.ts";
import { bindable, embeddedDialect } from "./query/embedded.ts";
import { transact } from "./query/transaction.ts";
import type { Tables } from "./schema.ts";

export type Engine = "embedded" | "postgres";

/** Queries on the store or inside one of its transactions: an owning module's functions take either. */
export type Queries = Kysely<Tables>;
export type Tx = Transaction<Tables>;

export interface Store {
  readonly engine: Engine;
  /** The query layer; a transaction (`transact`'s `tx`) is one too. */
  readonly query: Queries;
  /**
   * Runs `fn` as one transaction and resolves with its result once the change is committed (on
   * disk, on the embedded engine). Serial on the embedded engine; SERIALIZABLE on PostgreSQL and
   * run again when it conflicts with another, so `fn` does nothing outside the database.
   */
  transact<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** A write that needs no acknowledgement (a last-seen time): durable with the next commit or soon after; a failure is logged. */
  writeLazy(statement: Compilable): void;
  /** Changes whenever cached table contents must be dropped (the embedded database reloaded from disk). */
  readonly epoch: number;
  /** Ends the query layer; the embedded database itself is closed by its owner. */
  close(): Promise<void>;
}

export function embeddedStore(db: Database): Store {
  const query = new Kysely<Tables>({ dialect: embeddedDialect(db) });
  return {
    engine: "embedded",
    query,
    transact: (fn) => transact(query, fn),
    writeLazy: (statement) => {
      const { sql, parameters } = statement.compile();
      db.writeLazy((tx) => void tx.run(sql, bindable(parameters)));
    },
    get epoch() {
      return db.epoch;
    },
    close: () => query.destroy(),
  };
}
