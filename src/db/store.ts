/**
 * The data layer the domains query: Kysely over either engine, typed by the schema's tables
 * (src/db/schema.ts), with one way to run a transaction and one to write what needs no
 * acknowledgement. The embedded engine is the default; PostgreSQL's store (src/db/query/postgres.ts)
 * is loaded only when `database.url` names one.
 */
import { Kysely, type Compilable, type Transaction } from "kysely";
import type { Database, DatabaseStatus } from "./database.ts";
import { bindable, embeddedDialect, inTransactionOf } from "./query/embedded.ts";
import { transact } from "./query/transaction.ts";
import type { Tables } from "./schema.ts";

export type Engine = "embedded" | "postgres";

/** Queries on the store or inside one of its transactions: an owning module's functions take either. */
export type Queries = Kysely<Tables>;
export type Tx = Transaction<Tables>;

/** The engine's state for `/api/health`: which engine, its schema, whether it takes writes, and what only that engine has. */
export type StoreStatus =
  | ({ engine: "embedded"; schema_version: number } & DatabaseStatus)
  | {
      engine: "postgres";
      schema_version: number;
      state: "ok" | "failed";
      /** Why it cannot be used now (the password never in it). */
      error?: string;
      /** pg's pool: connections open, idle, and requests waiting for one. */
      connections: { total: number; idle: number; waiting: number };
    };

/** Synchronous reads of one committed state (the embedded database, or an image of one). */
export type ImageReader = Pick<Database, "get" | "all">;

/** What `exportImage` made: an embedded image and what `alongside` answered in the same state. */
export interface ExportedImage<T> {
  /** An embedded (SQLite) database file of everything committed: a backup's database on either engine. */
  image: Uint8Array;
  /** Resolves once every change in the image is durable (rejects if one could not be saved). */
  durable: Promise<void>;
  alongside: T;
}

export interface TransactOptions {
  /**
   * Called once the transaction committed, before its promise resolves: on the embedded engine as
   * soon as COMMIT ran in memory (what reads see from then on), before its frame is on disk; on
   * PostgreSQL once COMMIT returned. Not called when it did not commit.
   */
  committed?: () => void;
  /**
   * Tables whose other writers the transaction waits for instead of conflicting with: one that
   * many clients run at once and that reads a whole table (a bound on its rows, its next number)
   * would otherwise be aborted and run again by PostgreSQL until its attempts ran out. PostgreSQL
   * takes a lock on them before the transaction's first read; the embedded engine's transactions
   * are serial already.
   */
  serialOn?: ReadonlyArray<keyof Tables & string>;
}

export interface Store {
  readonly engine: Engine;
  /** The query layer; a transaction (`transact`'s `tx`) is one too. */
  readonly query: Queries;
  /**
   * Runs `fn` as one transaction and resolves with its result once the change is committed (on
   * disk, on the embedded engine). Serial on the embedded engine; SERIALIZABLE on PostgreSQL and
   * run again when it conflicts with another, so `fn` does nothing outside the database.
   */
  transact<T>(fn: (tx: Tx) => Promise<T>, options?: TransactOptions): Promise<T>;
  /** A write that needs no acknowledgement (a last-seen time): durable with the next commit or soon after; a failure is logged. */
  writeLazy(statement: Compilable): void;
  /** Changes whenever cached table contents must be dropped (the embedded database reloaded from disk). */
  readonly epoch: number;
  /** The engine's state (never throws: a database that cannot be reached is `state: "failed"`). */
  status(): Promise<StoreStatus>;
  /**
   * Everything committed as an embedded image (on PostgreSQL, its rows copied into a fresh
   * embedded database), and `alongside` run on that same state before anything else commits, so
   * that what it stages (a backup's package objects) matches the image exactly.
   */
  exportImage<T>(alongside: (image: ImageReader) => T): Promise<ExportedImage<T>>;
  /** Ends the query layer; the embedded database itself is closed by its owner. */
  close(): Promise<void>;
}

export function embeddedStore(db: Database): Store {
  const query = new Kysely<Tables>({ dialect: embeddedDialect(db) });
  return {
    engine: "embedded",
    query,
    transact: (fn, options) => inTransactionOf(db, () => transact(query, fn), options?.committed),
    writeLazy: (statement) => {
      const { sql, parameters } = statement.compile();
      db.writeLazy((tx) => void tx.run(sql, bindable(parameters)));
    },
    get epoch() {
      return db.epoch;
    },
    status: async () => {
      // Read from memory, which a failed write path leaves readable.
      const version = await query.selectFrom("schema_migrations").select((eb) => eb.fn.max("version").as("v")).executeTakeFirst();
      return { engine: "embedded", schema_version: Number(version?.v ?? 0), ...db.status() };
    },
    exportImage: async (alongside) => {
      // Held as a query holds it: no open transaction's rows are in the image.
      await db.connection.acquire();
      try {
        const { image, durable } = db.snapshot();
        return { image, durable, alongside: alongside(db) };
      } finally {
        db.connection.release();
      }
    },
    close: () => query.destroy(),
  };
}
