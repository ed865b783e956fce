/**
 * Kysely over the embedded database: one connection (the in-process sql.js one), held by one
 * caller at a time (the database's `connection` lock), so that a transaction's awaits never let
 * another query see its uncommitted rows or interleave with it; a transaction's writes are one
 * journal frame, acknowledged once on disk. Kysely's own SQLite adapter and compiler make the SQL.
 */
import {
  SelectQueryNode,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  type CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
} from "kysely";
import { AsyncLocalStorage } from "node:async_hooks";
import type { Database, OpenTransaction, SqlParam } from "../database.ts";

/**
 * The transaction the current async call chain runs in, once it holds the connection: a query on
 * the store (not on its `tx`) from inside would wait for the connection its own transaction holds,
 * for ever, so it fails at once instead, naming the mistake.
 */
const runningIn = new AsyncLocalStorage<{ db: Database; open: boolean; committed?: () => void }>();

const NESTED = "a query or transaction on the store inside one of its own transactions would wait for that transaction: query through its tx";

/** Calls of `inTransactionOf` not yet settled. */
let transactionsRunning = 0;

/**
 * Runs `fn` (which opens one transaction on `db`) so that a query on the store from inside it fails
 * instead of waiting for itself; `committed` is called once its COMMIT has run in memory. The
 * storage is disabled again whenever no transaction runs: on Node 20 an enabled AsyncLocalStorage
 * installs promise hooks that every promise of every request pays for, and queries outside
 * transactions need no context.
 */
export async function inTransactionOf<T>(db: Database, fn: () => Promise<T>, committed?: () => void): Promise<T> {
  const outer = runningIn.getStore();
  if (outer?.open && outer.db === db) throw new Error(NESTED);
  transactionsRunning++;
  try {
    return await runningIn.run({ db, open: false, committed }, fn);
  } finally {
    if (--transactionsRunning === 0) runningIn.disable();
  }
}

/** Kysely's parameters as sql.js binds them. */
export function bindable(parameters: readonly unknown[]): SqlParam[] {
  return parameters.map((value) => {
    if (typeof value === "bigint") return Number(value);
    if (typeof value === "boolean") return value ? 1 : 0;
    if (value === undefined) return null;
    return value as SqlParam;
  });
}

/** Whether a statement may change the database (and so goes into the journal). */
function writes(query: CompiledQuery): boolean {
  if (SelectQueryNode.is(query.query)) return false;
  return !/^\s*(SELECT|PRAGMA\s+\w+\s*$|EXPLAIN)\b/i.test(query.sql);
}

/**
 * One hold of the connection (the database's lock), from Kysely's acquire to its release or to an
 * earlier release at commit: once COMMIT has run in memory the next caller may go on while this
 * one waits for its frame to reach the disk, as a synchronous write lets others run meanwhile.
 */
class EmbeddedConnection implements DatabaseConnection {
  /** The open transaction, while Kysely's transaction() holds this connection. */
  transaction: OpenTransaction | undefined;
  private held = true;

  private readonly db: Database;

  constructor(db: Database) {
    this.db = db;
  }

  release(): void {
    if (!this.held) return;
    this.held = false;
    this.db.connection.release();
  }

  /** Commits in memory now, lets the connection go, tells `committed`, and resolves once the change is on disk. */
  async commit(transaction: OpenTransaction, committed?: () => void): Promise<void> {
    const durable = transaction.commit();
    this.release();
    committed?.();
    await durable;
  }

  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    const changes = writes(query);
    // Outside a transaction, a write is a transaction of its own: durable before it resolves.
    const transaction = this.transaction ?? (changes ? this.db.begin() : undefined);
    if (!transaction) return { rows: this.db.all<R>(query.sql, bindable(query.parameters)) };
    let outcome;
    try {
      outcome = transaction.query<R>(query.sql, bindable(query.parameters), changes);
    } catch (error) {
      if (!this.transaction) transaction.rollback();
      throw error;
    }
    if (!this.transaction) await this.commit(transaction);
    // No insertId, as on PostgreSQL: an insert asks for its id with RETURNING.
    if (!changes) return { rows: outcome.rows };
    return { rows: outcome.rows, numAffectedRows: BigInt(outcome.changes) };
  }

  async *streamQuery<R>(query: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    // sql.js holds the whole database in memory: a query's rows are there already.
    yield await this.executeQuery<R>(query);
  }
}

class EmbeddedDriver implements Driver {
  private readonly db: Database;

  constructor(db: Database) {
    this.db = db;
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    const running = runningIn.getStore();
    if (running?.open && running.db === this.db) throw new Error(NESTED);
    await this.db.connection.acquire();
    return new EmbeddedConnection(this.db);
  }

  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    (connection as EmbeddedConnection).release();
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    (connection as EmbeddedConnection).transaction = this.db.begin();
    const running = runningIn.getStore();
    if (running?.db === this.db) running.open = true;
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    const held = connection as EmbeddedConnection;
    const running = runningIn.getStore();
    await held.commit(this.ended(held), running?.db === this.db ? running.committed : undefined);
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    // Kysely also rolls back after a failed commit, which has ended the transaction already.
    const held = connection as EmbeddedConnection;
    const transaction = held.transaction;
    held.transaction = undefined;
    const running = runningIn.getStore();
    if (running?.db === this.db) running.open = false;
    transaction?.rollback();
  }

  async destroy(): Promise<void> {}

  private ended(connection: EmbeddedConnection): OpenTransaction {
    const running = runningIn.getStore();
    if (running?.db === this.db) running.open = false;
    const transaction = connection.transaction;
    if (!transaction) throw new Error("no open transaction");
    connection.transaction = undefined;
    return transaction;
  }
}

/**
 * SQLite's adapter, but without Kysely's own one-connection mutex: the driver's lock (the
 * database's `connection`) is that mutex, and it can refuse a query made from inside the
 * transaction it waits for, which Kysely's cannot (its lock would stay taken).
 */
class EmbeddedAdapter extends SqliteAdapter {
  override get supportsMultipleConnections(): boolean {
    return true;
  }
}

/** The Kysely dialect of the embedded database. Closing the Kysely instance leaves `db` open: its owner closes it. */
export function embeddedDialect(db: Database): Dialect {
  return {
    createAdapter: () => new EmbeddedAdapter(),
    createDriver: () => new EmbeddedDriver(db),
    createIntrospector: (kysely: Kysely<unknown>) => new SqliteIntrospector(kysely),
    createQueryCompiler: () => new SqliteQueryCompiler(),
  };
}
