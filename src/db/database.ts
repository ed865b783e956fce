import { mkdirSync, readdirSync, statSync, unlinkSync } from "node:fs";
import { unlink } from "node:fs/promises";
import { join } from "node:path";
import type { Database as SqlJsDatabase, SqlJsStatic, Statement as SqlJsStatement } from "sql.js";
import { encodeFrame, JournalWriter, type SqlParam, type Statement } from "./journal.ts";
import { IMAGE_FILE, imageSum, journalGenerations, journalName, markGeneration, openImage, replayJournals, writeImageSum } from "./image.ts";
import { loadSqlJs, type WasmSource } from "./wasm.ts";
import { CheckpointWorkerError, checkpointInWorker } from "./worker.ts";
import { Lock } from "./query/lock.ts";
import { fsyncDir, writeFileDurableAsync } from "../util/files.ts";
import { LabgateError } from "../util/errors.ts";
import { isoTime } from "../util/time.ts";

export type { SqlParam } from "./journal.ts";
export { DatabaseCorruptError, IMAGE_FILE, IMAGE_SUM_FILE } from "./image.ts";
export type Row = Record<string, SqlParam>;

/** The write path is down (disk full, I/O error); answered 503 until a reload succeeds. */
export class DatabaseUnavailableError extends LabgateError {
  constructor(message: string) {
    super("unavailable", message);
  }
}

export interface RunResult {
  changes: number;
  /** The rowid an INSERT (or REPLACE) statement inserted last; 0 for other statements. */
  lastInsertRowid: number;
}

/** Statements after which last_insert_rowid() means something (asking costs a query each time). */
const INSERTS = /^\s*(INSERT|REPLACE)\b/i;

/** What a write transaction may do. Only `run` statements are journaled, so they must be deterministic. */
export interface Tx {
  run(sql: string, params?: SqlParam[]): RunResult;
  get<T = Row>(sql: string, params?: SqlParam[]): T | undefined;
  all<T = Row>(sql: string, params?: SqlParam[]): T[];
}

/** What one statement of an open transaction gave: its rows (a SELECT's, or RETURNING's), and for a write how many rows it changed. */
export interface QueryOutcome<T = Row> {
  rows: T[];
  changes: number;
}

/** A transaction that may span awaits (Database.begin). */
export interface OpenTransaction {
  query<T = Row>(sql: string, params: SqlParam[], writes: boolean): QueryOutcome<T>;
  /** Commits in memory before it returns (throws if it cannot); resolves once the frame is on disk. */
  commit(): Promise<void>;
  rollback(): void;
}

export interface DatabaseOptions {
  /** Journal size that triggers a checkpoint. */
  checkpointBytes?: number;
  /** Idle time after the last change that triggers a checkpoint. */
  checkpointIntervalMs?: number;
  /** How long a lazy write may wait for a ride on the next commit. */
  lazyFlushMs?: number;
  log?: (level: "info" | "warn" | "error", message: string) => void;
}

export interface DatabaseStatus {
  state: "ok" | "failed";
  error?: string;
  wasm: WasmSource;
  image_bytes: number;
  journal_bytes: number;
  generation: number;
  last_checkpoint: string | null;
}

function toSqlParams(params: SqlParam[] | undefined): SqlParam[] {
  return (params ?? []).map((p) => (typeof p === "boolean" ? (p ? 1 : 0) : p === undefined ? null : p));
}

/**
 * sql.js (SQLite in WASM) kept in memory, made durable by a redo journal plus periodic images.
 *
 * - A write transaction runs synchronously in memory; its `run` statements become one journal
 *   frame, and the returned promise resolves once the frame is fsynced.
 * - A checkpoint exports the image, switches to a new journal generation, writes the image
 *   atomically and deletes the journals it covers. The image records its generation in
 *   `_labgate_meta`, so start-up replays exactly the journals that came after it.
 */
export class Database {
  readonly dir: string;
  private readonly SQL: SqlJsStatic;
  private readonly wasm: WasmSource;
  private readonly wasmBytes: Uint8Array;
  /** Checkpoints run in a worker thread unless it could not start here; then on the main thread. */
  private workerCheckpoints = true;
  private readonly options: Required<Omit<DatabaseOptions, "log">>;
  private readonly log: NonNullable<DatabaseOptions["log"]>;
  private sql!: SqlJsDatabase;
  private statements = new Map<string, SqlJsStatement>();
  private journal!: JournalWriter;
  private generation = 0;
  private loads = 0;
  private seq = 0;
  private inTransaction = false;
  /**
   * Held while a transaction spans awaits (the query layer's, src/db/query/embedded.ts): a
   * synchronous write, an export or a checkpoint of this connection waits for it, so that none
   * runs inside another's open transaction.
   */
  readonly connection = new Lock();
  private dirtySinceCheckpoint = false;
  private checkpointing: Promise<void> | undefined;
  private checkpointTimer: NodeJS.Timeout | undefined;
  private lastCheckpoint: Date | null = null;
  private failure: Error | undefined;
  private closed = false;

  private constructor(dir: string, SQL: SqlJsStatic, wasm: WasmSource, wasmBytes: Uint8Array, options: DatabaseOptions) {
    this.dir = dir;
    this.SQL = SQL;
    this.wasm = wasm;
    this.wasmBytes = wasmBytes;
    this.log = options.log ?? (() => {});
    this.options = {
      checkpointBytes: options.checkpointBytes ?? 8 * 1024 * 1024,
      checkpointIntervalMs: options.checkpointIntervalMs ?? 60_000,
      lazyFlushMs: options.lazyFlushMs ?? 1_000,
    };
  }

  /** Opens the database in `dir`: loads the image, replays the journals after it, and writes a fresh image if it replayed any. */
  static async open(dir: string, options: DatabaseOptions = {}): Promise<Database> {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const { SQL, source, wasm } = await loadSqlJs();
    const db = new Database(dir, SQL, source, wasm, options);
    db.removeStaleImageTemps();
    const needsImage = db.loadFromDisk();
    if (needsImage) await db.checkpoint({ inline: true });
    db.armCheckpointTimer();
    return db;
  }

  private get imagePath(): string {
    return join(this.dir, IMAGE_FILE);
  }

  /** Image temp files of checkpoints that a crash interrupted. */
  private removeStaleImageTemps(): void {
    for (const name of readdirSync(this.dir)) if (name.startsWith(`${IMAGE_FILE}.`) && name.endsWith(".tmp")) unlinkSync(join(this.dir, name));
  }

  /**
   * Rebuilds the in-memory database from the image and the journals (at start and after a write
   * failure). Says whether a new image is due: there was none, or frames were replayed.
   */
  private loadFromDisk(): boolean {
    const { sql, generation: imageGeneration, exists } = openImage(this.SQL, this.dir);
    let replayed;
    try {
      replayed = replayJournals(sql, this.dir, imageGeneration, Infinity, (message) => this.log("warn", message));
    } catch (error) {
      sql.close();
      throw error;
    }
    this.replaceConnection(sql);
    this.loads += 1;
    this.seq = replayed.seq;
    this.dirtySinceCheckpoint = !exists || replayed.frames > 0;
    // New frames always go to a fresh generation, never after a possibly torn tail.
    this.generation = replayed.generation + 1;
    this.journal = new JournalWriter(join(this.dir, journalName(this.generation)), (error) => this.onJournalFailure(error));
    fsyncDir(this.dir);
    return this.dirtySinceCheckpoint;
  }

  /**
   * Changes whenever the in-memory state is rebuilt from disk (start-up, recovery after a write
   * failure, which drops commits that never reached the disk): caches of table contents key on it.
   */
  get epoch(): number {
    return this.loads;
  }

  private replaceConnection(sql: SqlJsDatabase): void {
    for (const stmt of this.statements.values()) stmt.free();
    this.statements.clear();
    try {
      this.sql?.close();
    } catch {
      /* already closed */
    }
    this.sql = sql;
  }

  private prepare(text: string): SqlJsStatement {
    let stmt = this.statements.get(text);
    if (!stmt) {
      stmt = this.sql.prepare(text);
      this.statements.set(text, stmt);
    }
    return stmt;
  }

  get<T = Row>(text: string, params?: SqlParam[]): T | undefined {
    const stmt = this.prepare(text);
    try {
      stmt.bind(toSqlParams(params));
      return stmt.step() ? (stmt.getAsObject() as T) : undefined;
    } finally {
      stmt.reset();
    }
  }

  all<T = Row>(text: string, params?: SqlParam[]): T[] {
    const stmt = this.prepare(text);
    const rows: T[] = [];
    try {
      stmt.bind(toSqlParams(params));
      while (stmt.step()) rows.push(stmt.getAsObject() as T);
      return rows;
    } finally {
      stmt.reset();
    }
  }

  private runStatement(text: string, params: SqlParam[]): RunResult {
    const stmt = this.prepare(text);
    try {
      stmt.run(params);
    } finally {
      stmt.reset();
    }
    const changes = this.sql.getRowsModified();
    const lastInsertRowid = INSERTS.test(text) ? Number(this.get<{ id: number }>("SELECT last_insert_rowid() AS id")!.id) : 0;
    return { changes, lastInsertRowid };
  }

  private assertWritable(): void {
    if (this.closed) throw new DatabaseUnavailableError("database is closed");
    if (this.failure) throw new DatabaseUnavailableError(`database is unavailable: ${this.failure.message}`);
  }

  private transact<T>(fn: (tx: Tx) => T): { result: T; ops: Statement[] } {
    this.assertWritable();
    if (this.inTransaction) throw new Error("nested write transaction");
    const ops: Statement[] = [];
    const tx: Tx = {
      run: (text, params) => {
        const values = toSqlParams(params);
        const result = this.runStatement(text, values);
        ops.push([text, values]);
        return result;
      },
      get: (text, params) => this.get(text, params),
      all: (text, params) => this.all(text, params),
    };
    this.inTransaction = true;
    this.sql.run("BEGIN");
    try {
      const result = fn(tx);
      if (result instanceof Promise) throw new Error("write transactions must be synchronous");
      this.sql.run("COMMIT");
      return { result, ops };
    } catch (error) {
      this.sql.run("ROLLBACK");
      throw error;
    } finally {
      this.inTransaction = false;
    }
  }

  /**
   * Runs `fn` as one transaction. The promise resolves with its result once the change is on
   * disk, and rejects (DatabaseUnavailableError) if it could not be made durable.
   */
  async write<T>(fn: (tx: Tx) => T): Promise<T> {
    const { result, ops } = await this.whenConnectionFree(() => this.transact(fn));
    if (ops.length > 0) await this.appendDurably(ops);
    return result;
  }

  /** One committed transaction's statements as one journal frame, resolved once it is fsynced. */
  private async appendDurably(ops: Statement[]): Promise<void> {
    const frame = encodeFrame({ seq: ++this.seq, ops });
    this.dirtySinceCheckpoint = true;
    try {
      await this.journal.append(frame);
    } catch (error) {
      throw new DatabaseUnavailableError(`change not saved: ${(error as Error).message}`);
    }
    this.maybeCheckpoint();
  }

  /**
   * A transaction that may span awaits, for the query layer's embedded driver (src/db/query/):
   * the caller holds the connection while it is open (the driver's lock), its writes become one
   * journal frame at `commit`, which resolves once the frame is on disk, as `write` does.
   */
  begin(): OpenTransaction {
    this.assertWritable();
    if (this.inTransaction) throw new Error("nested write transaction");
    const ops: Statement[] = [];
    this.inTransaction = true;
    this.sql.run("BEGIN");
    let open = true;
    const end = (verb: "COMMIT" | "ROLLBACK") => {
      if (!open) throw new Error("the transaction has ended");
      open = false;
      this.inTransaction = false;
      this.sql.run(verb);
    };
    return {
      query: <T>(text: string, params: SqlParam[], writes: boolean) => {
        if (!open) throw new Error("the transaction has ended");
        const values = toSqlParams(params);
        const result = this.execute<T>(text, values, writes);
        if (writes) ops.push([text, values]);
        return result;
      },
      // COMMIT runs (or throws) at once, in memory; the promise is the frame reaching the disk.
      commit: () => {
        end("COMMIT");
        return ops.length > 0 ? this.appendDurably(ops) : Promise.resolve();
      },
      rollback: () => end("ROLLBACK"),
    };
  }

  /**
   * Runs one statement and collects what it returns (RETURNING rows too); `writes` says whether it
   * changes anything. No last_insert_rowid (a query of its own per INSERT): the query layer's
   * inserts ask for their ids with RETURNING, as they must on PostgreSQL, which gives no insertId.
   */
  private execute<T>(text: string, params: SqlParam[], writes: boolean): QueryOutcome<T> {
    const stmt = this.prepare(text);
    const rows: T[] = [];
    try {
      stmt.bind(params);
      while (stmt.step()) rows.push(stmt.getAsObject() as T);
    } finally {
      stmt.reset();
    }
    return { rows, changes: writes ? this.sql.getRowsModified() : 0 };
  }

  /** A write that needs no acknowledgement (e.g. a last-seen time): durable with the next commit or within a second. */
  writeLazy(fn: (tx: Tx) => void): void {
    const written = this.whenConnectionFree(() => {
      const { ops } = this.transact(fn);
      if (ops.length === 0) return;
      this.dirtySinceCheckpoint = true;
      this.journal.appendLazy(encodeFrame({ seq: ++this.seq, ops }), this.options.lazyFlushMs);
    });
    if (written instanceof Promise) written.catch((error: Error) => this.log("warn", `a lazy write was dropped: ${error.message}`));
  }

  /** Runs `fn` now when no transaction holds the connection, else as soon as the holder lets go. */
  private whenConnectionFree<T>(fn: () => T): T | Promise<T> {
    if (!this.connection.busy) return fn();
    return this.connection.acquire().then(() => {
      try {
        return fn();
      } finally {
        this.connection.release();
      }
    });
  }

  private onJournalFailure(error: Error): void {
    this.journal.discardPending(error);
    if (this.failure) return; // already going back to disk
    this.log("error", `journal write failed: ${error.message}; reloading the last durable state`);
    this.failure = error;
    // In-memory state holds commits that never reached the disk: go back to what is on disk.
    setImmediate(() => void this.recover());
  }

  private async recover(): Promise<void> {
    await this.checkpointing?.catch(() => {});
    if (this.closed) return;
    await this.journal.close().catch(() => {});
    try {
      this.loadFromDisk();
      this.failure = undefined;
      this.log("info", "database reloaded from disk after a write failure");
    } catch (error) {
      this.failure = error as Error;
      this.log("error", `database reload failed: ${(error as Error).message}`);
      // Raw timers here: the database paces its disk work in real time (src/db/worker.ts, release).
      setTimeout(() => void this.recover(), 5_000).unref();
    }
  }

  private maybeCheckpoint(): void {
    if (!this.checkpointing && this.journal.bytes >= this.options.checkpointBytes) void this.checkpoint().catch(() => {});
  }

  private armCheckpointTimer(): void {
    this.checkpointTimer = setInterval(() => {
      if (this.dirtySinceCheckpoint && !this.checkpointing) void this.checkpoint().catch(() => {});
    }, this.options.checkpointIntervalMs);
    this.checkpointTimer.unref();
  }

  /**
   * Writes a full image (temp file, fsync, rename, directory fsync) and drops the journals it
   * covers. Commits go to the next journal generation from the moment it starts. By default a
   * worker thread rebuilds the covered state from the files and writes the image, so the event
   * loop does nothing but wait; `inline` exports this connection instead (at start and shutdown,
   * or where no worker can start), which blocks for the export alone.
   */
  checkpoint({ inline = !this.workerCheckpoints }: { inline?: boolean } = {}): Promise<void> {
    if (this.checkpointing) return this.checkpointing;
    // An export of the connection may not see (nor, in sql.js, end) another's open transaction.
    if (inline && this.inTransaction) return Promise.resolve(this.whenConnectionFree(() => this.checkpoint({ inline }))).then((done) => done);
    if (this.failure) return Promise.reject(new DatabaseUnavailableError(`database is unavailable: ${this.failure.message}`));
    const covered = this.generation;
    let image: Uint8Array | undefined;
    if (inline) {
      markGeneration(this.sql, covered);
      image = this.sql.export();
    }
    const previous = this.journal;
    const drained = previous.close();
    this.generation = covered + 1;
    this.journal = new JournalWriter(join(this.dir, journalName(this.generation)), (error) => this.onJournalFailure(error), drained);
    this.dirtySinceCheckpoint = false;

    this.checkpointing = (async () => {
      try {
        // The image may only cover frames that are on disk: an earlier failure reloads from there instead.
        await drained;
        if (image) {
          await writeFileDurableAsync(this.imagePath, image);
          writeImageSum(this.dir, imageSum(image));
        } else await this.checkpointInWorker(covered);
        const stale = journalGenerations(this.dir).filter((gen) => gen <= covered);
        await Promise.all(stale.map((gen) => unlink(join(this.dir, journalName(gen)))));
        this.lastCheckpoint = new Date();
      } catch (error) {
        this.dirtySinceCheckpoint = true;
        this.log("warn", `checkpoint failed (journal kept, nothing lost): ${(error as Error).message}`);
        throw error;
      } finally {
        this.checkpointing = undefined;
      }
    })();
    return this.checkpointing;
  }

  /**
   * An image (SQLite format) of everything committed so far, for a backup, taken synchronously
   * (no commit lands halfway; files, generation and checkpoints are untouched), and a promise
   * that resolves once every change it holds is on disk. It rejects when one of them could not be
   * made durable (the database then reloads without it): such an image must not be kept.
   */
  snapshot(): { image: Uint8Array; durable: Promise<void> } {
    if (this.closed) throw new DatabaseUnavailableError("database is closed");
    if (this.failure) throw new DatabaseUnavailableError(`database is unavailable: ${this.failure.message}`);
    const image = this.sql.export();
    const loads = this.loads;
    const durable = this.journal.flush().then(() => {
      if (this.failure || this.loads !== loads) throw new DatabaseUnavailableError("a change in the snapshot could not be saved; try again");
    });
    durable.catch(() => {});
    return { image, durable };
  }

  private async checkpointInWorker(covered: number): Promise<void> {
    try {
      await checkpointInWorker(this.wasmBytes, { dir: this.dir, covered });
    } catch (error) {
      if (!(error instanceof CheckpointWorkerError)) throw error;
      // Nothing was written: from now on this process checkpoints on its main thread.
      this.workerCheckpoints = false;
      this.log("warn", `checkpoint worker unavailable (${error.message}); checkpoints run on the main thread`);
      throw error;
    }
  }

  status(): DatabaseStatus {
    let imageBytes = 0;
    try {
      imageBytes = statSync(this.imagePath).size;
    } catch {
      /* not written yet */
    }
    return {
      state: this.failure ? "failed" : "ok",
      ...(this.failure ? { error: this.failure.message } : {}),
      wasm: this.wasm,
      image_bytes: imageBytes,
      journal_bytes: this.journal.bytes,
      generation: this.generation,
      last_checkpoint: this.lastCheckpoint ? isoTime(this.lastCheckpoint) : null,
    };
  }

  /** Test hook: the next journal write fails as a full disk would. */
  failNextJournalWrite(error: Error): void {
    this.journal.failNextWrite = error;
  }

  /** Flushes the journal, writes a final image and releases the file handles. */
  async close(): Promise<void> {
    if (this.closed) return;
    if (this.checkpointTimer) clearInterval(this.checkpointTimer);
    await this.checkpointing?.catch(() => {});
    if (!this.failure) {
      try {
        await this.checkpoint({ inline: true });
      } catch {
        /* the journal still holds everything */
      }
    }
    this.closed = true;
    await this.journal.close().catch(() => {});
    for (const stmt of this.statements.values()) stmt.free();
    this.statements.clear();
    this.sql.close();
  }
}
