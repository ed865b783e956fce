/*
 * Audit entries of commands run on this machine beside the server (`labgate token issue`,
 * `labgate restore`): the server holds the database in memory, so a command cannot write to it
 * while a server runs. The command appends its entry to a spool file in the data dir instead,
 * and the server moves the file's entries into audit_log: at start (before it serves) and as
 * soon as the file changes.
 *
 * No entry is lost or kept twice, whichever side is killed when:
 * - The command writes each entry with one append (`\n{json}\n`), fsyncs it and only then acts
 *   (prints the token). A command killed mid-write leaves at most a torn line, which cannot
 *   run into the next entry (each starts on a line of its own) and is skipped when read.
 * - The server takes the file away by renaming it (appends from then on make a new file), moves
 *   its entries in transactions, then deletes it. A command whose append landed in a file the
 *   server had taken already sees that the name no longer leads to its file and appends again.
 * - Each entry has an id, kept in audit_log.spool_id under a unique index: an entry moved in
 *   twice (a server killed between its commit and the deletion, an append repeated) is kept once.
 */
import { randomUUID } from "node:crypto";
import { chownSync, closeSync, existsSync, fchownSync, fstatSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, statSync, watch, writeSync, type FSWatcher } from "node:fs";
import { join } from "node:path";
import { open } from "node:fs/promises";
import { createInterface } from "node:readline";
import type { Database, Tx } from "../db/index.ts";
import { fsyncDir } from "../util/files.ts";
import type { Logger } from "../util/log.ts";
import { every, type Clock } from "../util/time.ts";
import type { Actor } from "./audit.ts";

/** The spool's directory in the data dir (a directory of its own: the server watches only it). */
export const SPOOL_DIR = "audit-spool";
const APPENDING = "entries.jsonl";
const TAKEN = "taken.jsonl";
/** A command refuses to act rather than grow the spool beyond this (a server that never runs to take it). */
export const MAX_SPOOL_BYTES = 16 * 1024 * 1024;
/** An entry line at most (the detail is small: see recordAudit). */
const MAX_LINE = 8 * 1024;
/** Entries moved per transaction. */
const BATCH = 500;
/** A look at the file now and then, for file systems whose changes fs.watch does not report. */
const POLL_MS = 30_000;

/** The spool cannot take the entry: the command must not act. */
export class SpoolError extends Error {}

/** An entry as the spool holds it: the actor is the system (a command of this machine). */
interface SpooledEntry {
  id: string;
  time: string;
  actor: string;
  action: string;
  target: string;
  detail: Record<string, unknown> | null;
}

/**
 * Appends one entry to `dataDir`'s spool, durably, before the command acts on it (see the top of
 * this file). Throws SpoolError when it cannot.
 */
export function appendToSpool(dataDir: string, actor: Actor, action: string, target: string, detail?: Record<string, unknown>): void {
  const entry: SpooledEntry = { id: randomUUID(), time: actor.at.toISOString(), actor: actor.name, action, target, detail: detail ?? null };
  const line = Buffer.from(`\n${JSON.stringify(entry)}\n`);
  if (line.length > MAX_LINE) throw new SpoolError(`audit entry of ${line.length} bytes is too large`);
  const dir = join(dataDir, SPOOL_DIR);
  const path = join(dir, APPENDING);
  try {
    // Root acting on a service's data dir: the spool stays the service user's, or it could not take it.
    const owner = statSync(dataDir);
    const asRoot = process.getuid?.() === 0;
    if (mkdirSync(dir, { recursive: true, mode: 0o700 }) !== undefined) {
      if (asRoot) chownSync(dir, owner.uid, owner.gid);
      // A new directory's own entry must be durable too.
      fsyncDir(dataDir);
    }
    for (let attempt = 0; attempt < 10; attempt++) {
      const fd = openSync(path, "a", 0o600);
      try {
        const before = fstatSync(fd);
        if (before.size + line.length > MAX_SPOOL_BYTES) {
          throw new SpoolError(`the audit spool ${path} is full (${before.size} bytes): start labgate serve on ${dataDir} to move it into the audit log`);
        }
        if (asRoot && before.uid !== owner.uid) fchownSync(fd, owner.uid, owner.gid);
        writeSync(fd, line);
        fsyncSync(fd);
        fsyncDir(dir);
        // Still the file under the name: the server takes it only later, and reads this entry then.
        let now;
        try {
          now = statSync(path);
        } catch {
          now = undefined;
        }
        if (now && now.ino === before.ino && now.dev === before.dev) return;
      } finally {
        closeSync(fd);
      }
    }
  } catch (error) {
    if (error instanceof SpoolError) throw error;
    throw new SpoolError(`audit entry not written to ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  throw new SpoolError(`audit entry not written to ${path}: the file kept being taken`);
}

/** The entry of one spool line, or a reason to skip it. */
function parseLine(line: string): SpooledEntry | string {
  if (line.length > MAX_LINE) return "too long";
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return "not JSON (a torn write)";
  }
  const entry = value as Partial<SpooledEntry> | null;
  const text = (v: unknown, max: number) => typeof v === "string" && v.length > 0 && v.length <= max;
  if (!entry || typeof entry !== "object") return "not an object";
  if (!text(entry.id, 64) || !text(entry.actor, 256) || !text(entry.action, 64) || !text(entry.target, 512)) return "missing or bad fields";
  if (!text(entry.time, 40) || !Number.isFinite(Date.parse(entry.time!))) return "bad time";
  if (entry.detail !== null && (typeof entry.detail !== "object" || Array.isArray(entry.detail))) return "bad detail";
  return entry as SpooledEntry;
}

function insert(tx: Tx, entry: SpooledEntry): void {
  tx.run("INSERT OR IGNORE INTO audit_log (time, actor_kind, actor, token_id, client, action, target, outcome, detail, spool_id) VALUES (?, 'system', ?, NULL, '', ?, ?, 'ok', ?, ?)", [
    new Date(entry.time).toISOString(),
    entry.actor,
    entry.action,
    entry.target,
    entry.detail === null ? null : JSON.stringify(entry.detail),
    entry.id,
  ]);
}

/** The server's side: moves the spool's entries into audit_log (see the top of this file). */
export class AuditSpool {
  private readonly db: Database;
  private readonly dir: string;
  private readonly log: Logger;
  private readonly clock: Clock;
  private watcher: FSWatcher | undefined;
  private stopPolling: (() => void) | undefined;
  private running: Promise<number> | undefined;
  private again = false;

  constructor(db: Database, dataDir: string, log: Logger, clock: Clock) {
    this.db = db;
    this.dir = join(dataDir, SPOOL_DIR);
    this.log = log;
    this.clock = clock;
  }

  /** Watches the spool directory (made if missing); call ingest() for what is there already. */
  start(): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    try {
      this.watcher = watch(this.dir, () => void this.ingest());
      this.watcher.on("error", (error) => this.log.warn(`audit spool: watch ended (${error.message}); looking every ${POLL_MS / 1000} s`));
      this.watcher.unref();
    } catch (error) {
      this.log.warn(`audit spool: cannot watch ${this.dir} (${(error as Error).message}); looking every ${POLL_MS / 1000} s`);
    }
    this.stopPolling = every(this.clock, POLL_MS, () => void this.ingest());
  }

  stop(): void {
    this.watcher?.close();
    this.stopPolling?.();
  }

  /** Moves what the spool holds into the log; resolves with how many entries were read. One at a time: a call meanwhile runs once more after it. */
  ingest(): Promise<number> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      let read = 0;
      do {
        this.again = false;
        try {
          read += await this.take();
        } catch (error) {
          this.log.warn(`audit spool: ${(error as Error).message}; kept for the next try`);
        }
      } while (this.again);
      return read;
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  /** The file taken earlier (a server stopped before it deleted it), then the one being appended to. */
  private async take(): Promise<number> {
    const taken = join(this.dir, TAKEN);
    let read = 0;
    if (existsSync(taken)) read += await this.moveAndDelete(taken);
    try {
      renameSync(join(this.dir, APPENDING), taken);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return read;
      throw error;
    }
    return read + (await this.moveAndDelete(taken));
  }

  private async moveAndDelete(path: string): Promise<number> {
    const read = await this.move(path);
    rmSync(path, { force: true });
    fsyncDir(this.dir);
    return read;
  }

  /** Moves the entries of `path` into the log, BATCH a transaction; skips (and logs) lines that are not entries. */
  private async move(path: string): Promise<number> {
    const handle = await open(path, "r");
    const lines = createInterface({ input: handle.createReadStream({ encoding: "utf8" }), crlfDelay: Infinity });
    let batch: SpooledEntry[] = [];
    let read = 0;
    const flush = async () => {
      const entries = batch;
      batch = [];
      if (entries.length) await this.db.write((tx) => entries.forEach((entry) => insert(tx, entry)));
    };
    let number = 0;
    try {
      for await (const line of lines) {
        number += 1;
        if (line === "") continue;
        const entry = parseLine(line);
        if (typeof entry === "string") {
          this.log.warn(`audit spool: line ${number} skipped: ${entry}`);
          continue;
        }
        batch.push(entry);
        read += 1;
        if (batch.length >= BATCH) await flush();
      }
    } finally {
      await handle.close().catch(() => {});
    }
    await flush();
    return read;
  }
}
