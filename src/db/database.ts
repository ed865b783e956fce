import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import type { Database as SqlJsDatabase, SqlJsStatic, Statement as SqlJsStatement } from "sql.js";
import { encodeFrame, JournalWriter, readJournal, type SqlParam, type Statement } from "./journal.ts";
import { loadSqlJs, type WasmSource } from "./wasm.ts";
import { fsyncDir, writeFileDurable } from "../util/files.ts";

export type { SqlParam } from "./journal.ts";
export type Row = Record<string, SqlParam>;

export const IMAGE_FILE = "labgate.db";
const JOURNAL_PATTERN = /^labgate\.journal\.(\d+)$/;
const journalName = (gen: number) => `labgate.journal.${gen}`;
const SQLITE_MAGIC = Buffer.from("SQLite format 3\0", "latin1");

/** A database file or journal that cannot be trusted; the server must not start on it. */
export class DatabaseCorruptError extends Error {}

/** The write path is down (disk full, I/O error); answered 503 until a reload succeeds. */
export class DatabaseUnavailableError extends Error {}

export interface RunResult {
  changes: number;
  lastInsertRowid: number;
}

/** What a write transaction may do. Only `run` statements are journaled, so they must be deterministic. */
export interface Tx {
  run(sql: string, params?: SqlParam[]): RunResult;
  get<T = Row>(sql: string, params?: SqlParam[]): T | undefined;
  all<T = Row>(sql: string, params?: SqlParam[]): T[];
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

/** Checks the SQLite header so that a truncated or foreign file is refused, never overwritten. */
function checkImage(path: string, bytes: Buffer): void {
  if (bytes.length < 100 || !bytes.subarray(0, 16).equals(SQLITE_MAGIC)) {
    throw new DatabaseCorruptError(`${path} is not a SQLite database (bad header); refusing to start and leaving it untouched`);
  }
  const rawPageSize = bytes.readUInt16BE(16);
  const pageSize = rawPageSize === 1 ? 65536 : rawPageSize;
  const pageCount = bytes.readUInt32BE(28);
  if (pageCount > 0 && bytes.length !== pageSize * pageCount) {
    throw new DatabaseCorruptError(
      `${path} is truncated or damaged (${bytes.length} bytes, header says ${pageSize * pageCount}); refusing to start and leaving it untouched`,
    );
  }
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
  private readonly options: Required<Omit<DatabaseOptions, "log">>;
  private readonly log: NonNullable<DatabaseOptions["log"]>;
  private sql!: SqlJsDatabase;
  private statements = new Map<string, SqlJsStatement>();
  private journal!: JournalWriter;
  private generation = 0;
  private loads = 0;
  private seq = 0;
  private inTransaction = false;
  private dirtySinceCheckpoint = false;
  private checkpointing: Promise<void> | undefined;
  private checkpointTimer: NodeJS.Timeout | undefined;
  private lastCheckpoint: Date | null = null;
  private failure: Error | undefined;
  private closed = false;

  private constructor(dir: string, SQL: SqlJsStatic, wasm: WasmSource, options: DatabaseOptions) {
    this.dir = dir;
    this.SQL = SQL;
    this.wasm = wasm;
    this.log = options.log ?? (() => {});
    this.options = {
      checkpointBytes: options.checkpointBytes ?? 8 * 1024 * 1024,
      checkpointIntervalMs: options.checkpointIntervalMs ?? 60_000,
      lazyFlushMs: options.lazyFlushMs ?? 1_000,
    };
  }

  /** Opens the database in `dir`: loads the image, replays the journals after it, writes a fresh image. */
  static async open(dir: string, options: DatabaseOptions = {}): Promise<Database> {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const { SQL, source } = await loadSqlJs();
    const db = new Database(dir, SQL, source, options);
    db.removeStaleImageTemps();
    db.loadFromDisk();
    await db.checkpoint();
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

  private journalGenerations(): number[] {
    return readdirSync(this.dir)
      .map((name) => JOURNAL_PATTERN.exec(name)?.[1])
      .filter((g): g is string => g !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
  }

  /** Rebuilds the in-memory database from the image and the journals (at start and after a write failure). */
  private loadFromDisk(): void {
    let imageGeneration = 0;
    let sql: SqlJsDatabase;
    if (existsSync(this.imagePath)) {
      const bytes = readFileSync(this.imagePath);
      checkImage(this.imagePath, bytes);
      try {
        sql = new this.SQL.Database(bytes);
        const check = sql.exec("PRAGMA quick_check")[0]?.values[0]?.[0];
        if (check !== "ok") throw new Error(String(check));
        sql.run("CREATE TABLE IF NOT EXISTS _labgate_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
        const row = sql.exec("SELECT value FROM _labgate_meta WHERE key = 'generation'")[0]?.values[0]?.[0];
        imageGeneration = row === undefined ? 0 : Number(row);
      } catch (error) {
        if (error instanceof DatabaseCorruptError) throw error;
        throw new DatabaseCorruptError(
          `${this.imagePath} is damaged (${(error as Error).message}); refusing to start and leaving it untouched`,
        );
      }
    } else {
      sql = new this.SQL.Database();
      sql.run("CREATE TABLE IF NOT EXISTS _labgate_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    }
    sql.run("PRAGMA foreign_keys = ON");
    // SQLite's own rollback journal would be a file in sql.js's in-memory file system, created,
    // written and deleted by every transaction. Durability comes from the redo journal, and a
    // crash loses the in-memory database anyway, so the rollback journal can live in memory.
    sql.run("PRAGMA journal_mode = MEMORY");

    let expected = imageGeneration + 1;
    let lastSeq = 0;
    for (const gen of this.journalGenerations()) {
      const path = join(this.dir, journalName(gen));
      if (gen <= imageGeneration) continue; // already inside the image; removed by the next checkpoint
      if (gen !== expected) {
        sql.close();
        throw new DatabaseCorruptError(`journal generation ${expected} is missing before ${path}; refusing to start`);
      }
      const { frames, validBytes, totalBytes } = readJournal(path);
      if (validBytes < totalBytes) {
        this.log("warn", `${path}: ignoring ${totalBytes - validBytes} bytes of torn journal tail`);
      }
      for (const frame of frames) {
        sql.run("BEGIN");
        try {
          for (const [text, params] of frame.ops) sql.run(text, params);
          sql.run("COMMIT");
        } catch (error) {
          sql.run("ROLLBACK");
          sql.close();
          throw new DatabaseCorruptError(`${path}: frame ${frame.seq} does not replay (${(error as Error).message}); refusing to start`);
        }
        lastSeq = frame.seq;
      }
      expected = gen + 1;
    }

    this.replaceConnection(sql);
    this.loads += 1;
    this.generation = expected - 1;
    this.seq = lastSeq;
    this.dirtySinceCheckpoint = true;
    // New frames always go to a fresh generation, never after a possibly torn tail.
    this.generation += 1;
    this.journal = new JournalWriter(join(this.dir, journalName(this.generation)), (error) => this.onJournalFailure(error));
    fsyncDir(this.dir);
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
    const lastInsertRowid = Number(this.get<{ id: number }>("SELECT last_insert_rowid() AS id")!.id);
    return { changes, lastInsertRowid };
  }

  private transact<T>(fn: (tx: Tx) => T): { result: T; ops: Statement[] } {
    if (this.closed) throw new DatabaseUnavailableError("database is closed");
    if (this.failure) throw new DatabaseUnavailableError(`database is unavailable: ${this.failure.message}`);
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
    const { result, ops } = this.transact(fn);
    if (ops.length === 0) return result;
    const frame = encodeFrame({ seq: ++this.seq, ops });
    this.dirtySinceCheckpoint = true;
    try {
      await this.journal.append(frame);
    } catch (error) {
      throw new DatabaseUnavailableError(`change not saved: ${(error as Error).message}`);
    }
    this.maybeCheckpoint();
    return result;
  }

  /** A write that needs no acknowledgement (e.g. a last-seen time): durable with the next commit or within a second. */
  writeLazy(fn: (tx: Tx) => void): void {
    const { ops } = this.transact(fn);
    if (ops.length === 0) return;
    this.dirtySinceCheckpoint = true;
    this.journal.appendLazy(encodeFrame({ seq: ++this.seq, ops }), this.options.lazyFlushMs);
  }

  private onJournalFailure(error: Error): void {
    this.log("error", `journal write failed: ${error.message}; reloading the last durable state`);
    this.failure = error;
    this.journal.discardPending(error);
    // In-memory state holds commits that never reached the disk: go back to what is on disk.
    setImmediate(() => void this.recover());
  }

  private async recover(): Promise<void> {
    await this.checkpointing;
    if (this.closed) return;
    try {
      this.journal.close();
    } catch {
      /* best effort */
    }
    try {
      this.loadFromDisk();
      this.failure = undefined;
      this.log("info", "database reloaded from disk after a write failure");
    } catch (error) {
      this.failure = error as Error;
      this.log("error", `database reload failed: ${(error as Error).message}`);
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
   * covers. The export is synchronous; commits arriving during the file write go to the next
   * journal generation.
   */
  checkpoint(): Promise<void> {
    if (this.checkpointing) return this.checkpointing;
    if (this.failure) return Promise.reject(new DatabaseUnavailableError(`database is unavailable: ${this.failure.message}`));
    const covered = this.generation;
    this.journal.flushNow();
    this.sql.run("INSERT INTO _labgate_meta (key, value) VALUES ('generation', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", [
      String(covered),
    ]);
    const image = this.sql.export();
    this.journal.close();
    this.generation = covered + 1;
    this.journal = new JournalWriter(join(this.dir, journalName(this.generation)), (error) => this.onJournalFailure(error));
    this.dirtySinceCheckpoint = false;

    this.checkpointing = (async () => {
      // Let the event loop answer requests between export and the file write.
      await new Promise((resolve) => setImmediate(resolve));
      try {
        writeFileDurable(this.imagePath, image);
        for (const gen of this.journalGenerations()) if (gen <= covered) unlinkSync(join(this.dir, journalName(gen)));
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
   * An image (SQLite format) of everything committed so far, for a backup. Synchronous, so no
   * commit can land halfway; the journal is flushed first, so every change the image holds is
   * on disk as well. Does not touch the files, the generation or the checkpoint schedule.
   */
  snapshot(): Uint8Array {
    if (this.closed) throw new DatabaseUnavailableError("database is closed");
    this.journal.flushNow();
    if (this.failure) throw new DatabaseUnavailableError(`database is unavailable: ${this.failure.message}`);
    return this.sql.export();
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
      last_checkpoint: this.lastCheckpoint?.toISOString() ?? null,
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
        await this.checkpoint();
      } catch {
        /* the journal still holds everything */
      }
    }
    this.closed = true;
    this.journal.close();
    for (const stmt of this.statements.values()) stmt.free();
    this.statements.clear();
    this.sql.close();
  }
}
