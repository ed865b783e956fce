/**
 * Kysely over the embedded database: one connection (the in-process sql.js one), held by one
 * caller at a time, so that a transaction's awaits never let another query see its uncommitted
 * rows or interleave with it; a transaction's writes are one journal frame, acknowledged once on
 * disk. Kysely's own SQLite adapter and compiler make the SQL.
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
import type { Database, OpenTransaction, SqlParam } from "../database.ts";
import { Lock } from "./lock.ts";

/** Kysely's parameters as sql.js binds them. */
function bindable(parameters: readonly unknown[]): SqlParam[] {
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

class EmbeddedConnection implements DatabaseConnection {
  /** The open transaction, while Kysely's transaction() holds this connection. */
  transaction: OpenTransaction | undefined;

  private readonly db: Database;

  constructor(db: Database) {
    this.db = db;
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
    if (!this.transaction) await transaction.commit();
    if (!changes) return { rows: outcome.rows };
    return {
      rows: outcome.rows,
      numAffectedRows: BigInt(outcome.changes),
      ...(outcome.lastInsertRowid ? { insertId: BigInt(outcome.lastInsertRowid) } : {}),
    };
  }

  async *streamQuery<R>(query: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    // sql.js holds the whole database in memory: a query's rows are there already.
    yield await this.executeQuery<R>(query);
  }
}

class EmbeddedDriver implements Driver {
  private readonly lock = new Lock();
  private readonly connection: EmbeddedConnection;

  private readonly db: Database;

  constructor(db: Database) {
    this.db = db;
    this.connection = new EmbeddedConnection(db);
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    await this.lock.acquire();
    return this.connection;
  }

  async releaseConnection(): Promise<void> {
    this.lock.release();
  }

  async beginTransaction(): Promise<void> {
    this.connection.transaction = this.db.begin();
  }

  async commitTransaction(): Promise<void> {
    const transaction = this.ended();
    await transaction.commit();
  }

  async rollbackTransaction(): Promise<void> {
    // Kysely also rolls back after a failed commit, which has ended the transaction already.
    const transaction = this.connection.transaction;
    this.connection.transaction = undefined;
    transaction?.rollback();
  }

  async destroy(): Promise<void> {}

  private ended(): OpenTransaction {
    const transaction = this.connection.transaction;
    if (!transaction) throw new Error("no open transaction");
    this.connection.transaction = undefined;
    return transaction;
  }
}

/** The Kysely dialect of the embedded database. Closing the Kysely instance leaves `db` open: its owner closes it. */
export function embeddedDialect(db: Database): Dialect {
  return {
    createAdapter: () => new SqliteAdapter(),
    createDriver: () => new EmbeddedDriver(db),
    createIntrospector: (kysely: Kysely<unknown>) => new SqliteIntrospector(kysely),
    createQueryCompiler: () => new SqliteQueryCompiler(),
  };
}
