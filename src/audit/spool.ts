/*
 * Audit entries of commands run on this machine beside the server (`labgate token issue`,
 * `labgate restore`): the server holds the database in memory, so a command cannot write to it
 * while a server runs. The command leaves its entry in the spool directory of the data dir
 * instead, and the server moves the entries into audit_log: at start (before it serves) and as
 * soon as the directory changes.
 *
 * One file per entry, so that the two sides never write the same file:
 * - The command writes `<id>.tmp`, fsyncs it, renames it to `<id>.json` and fsyncs the directory;
 *   only then does it act (print the token). A command killed before the rename leaves a `.tmp`
 *   the server never reads (and removes once it is old): that command did nothing.
 * - The server reads the `.json` files, inserts their entries in transactions, and deletes the
 *   files after the commit. Each entry's id is kept in audit_log.spool_id under a unique index: a
 *   file read again (a server killed between its commit and the deletion) is kept once.
 */
import { randomUUID } from "node:crypto";
import { chownSync, closeSync, fchownSync, fsyncSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statSync, watch, writeSync, type FSWatcher } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Store, Tx } from "../db/store.ts";
import { fsyncDir } from "../util/files.ts";
import type { Logger } from "../util/log.ts";
import { every, isoTime, type Clock } from "../util/time.ts";
import type { Actor } from "./audit.ts";

/** The spool's directory in the data dir (a directory of its own: the server watches only it). */
export const SPOOL_DIR = "audit-spool";
const ENTRY = ".json";
const WRITING = ".tmp";
const UNREADABLE = ".bad";
/** A command refuses to act rather than grow the spool beyond this many files (a server that never runs to take them). */
export const MAX_SPOOL_FILES = 10_000;
/** An entry at most (the detail is small: see recordAudit). */
const MAX_ENTRY = 8 * 1024;
/** Entries moved per transaction. */
const BATCH = 500;
/** A look now and then, for file systems whose changes fs.watch does not report. */
const POLL_MS = 30_000;
/** A `.tmp` this old belongs to a command that was killed before it acted. */
const STALE_MS = 10 * 60_000;

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
 * Leaves one entry in `dataDir`'s spool, durably, before the command acts on it (see the top of
 * this file). Throws SpoolError when it cannot.
 */
export function appendToSpool(dataDir: string, actor: Actor, action: string, target: string, detail?: Record<string, unknown>): void {
  const entry: SpooledEntry = { id: randomUUID(), time: isoTime(actor.at), actor: actor.name, action, target, detail: detail ?? null };
  const bytes = Buffer.from(JSON.stringify(entry));
  if (bytes.length > MAX_ENTRY) throw new SpoolError(`audit entry of ${bytes.length} bytes is too large`);
  const dir = join(dataDir, SPOOL_DIR);
  const tmp = join(dir, entry.id + WRITING);
  try {
    // Root acting on a service's data dir: the spool stays the service user's, or it could not take it.
    const owner = statSync(dataDir);
    const asRoot = process.getuid?.() === 0;
    if (mkdirSync(dir, { recursive: true, mode: 0o700 }) !== undefined) {
      if (asRoot) chownSync(dir, owner.uid, owner.gid);
      // A new directory's own entry must be durable too.
      fsyncDir(dataDir);
    }
    if (readdirSync(dir).length >= MAX_SPOOL_FILES) {
      throw new SpoolError(`the audit spool ${dir} is full (${MAX_SPOOL_FILES} entries): start labgate serve on ${dataDir} to move it into the audit log`);
    }
    const fd = openSync(tmp, "wx", 0o600);
    try {
      if (asRoot) fchownSync(fd, owner.uid, owner.gid);
      writeSync(fd, bytes);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, join(dir, entry.id + ENTRY));
    fsyncDir(dir);
  } catch (error) {
    rmSync(tmp, { force: true });
    if (error instanceof SpoolError) throw error;
    throw new SpoolError(`audit entry not written to ${dir}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

/** The entry of one spool file, or a reason to set it aside. */
function parseEntry(source: string): SpooledEntry | string {
  if (source.length > MAX_ENTRY) return "too long";
  let value: unknown;
  try {
    value = JSON.parse(source);
  } catch {
    return "not JSON";
  }
  const entry = value as Partial<SpooledEntry> | null;
  const text = (v: unknown, max: number) => typeof v === "string" && v.length > 0 && v.length <= max;
  if (!entry || typeof entry !== "object") return "not an object";
  if (!text(entry.id, 64) || !text(entry.actor, 256) || !text(entry.action, 64) || !text(entry.target, 512)) return "missing or bad fields";
  if (!text(entry.time, 40) || !Number.isFinite(Date.parse(entry.time!))) return "bad time";
  if (entry.detail !== null && (typeof entry.detail !== "object" || Array.isArray(entry.detail))) return "bad detail";
  return entry as SpooledEntry;
}

/** Inserts an entry once: a file read again (see the top of this file) has its spool_id in the log already. */
async function insert(tx: Tx, entry: SpooledEntry): Promise<void> {
  await tx
    .insertInto("audit_log")
    .values({
      time: isoTime(Date.parse(entry.time)),
      actor_kind: "system",
      actor: entry.actor,
      token_id: null,
      client: "",
      action: entry.action,
      target: entry.target,
      outcome: "ok",
      detail: entry.detail === null ? null : JSON.stringify(entry.detail),
      spool_id: entry.id,
    })
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** The server's side: moves the spool's entries into audit_log (see the top of this file). */
export class AuditSpool {
  private readonly store: Store;
  private readonly dir: string;
  private readonly log: Logger;
  private readonly clock: Clock;
  private watcher: FSWatcher | undefined;
  private stopPolling: (() => void) | undefined;
  private running: Promise<number> | undefined;
  private again = false;

  constructor(store: Store, dataDir: string, log: Logger, clock: Clock) {
    this.store = store;
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

  /** Moves the spool's entries into the log, BATCH a transaction, and deletes their files once committed. */
  private async take(): Promise<number> {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw error;
    }
    this.removeStale(names.filter((name) => name.endsWith(WRITING)));
    const files = names.filter((name) => name.endsWith(ENTRY));
    let read = 0;
    for (let at = 0; at < files.length; at += BATCH) {
      const batch: Array<{ file: string; entry: SpooledEntry }> = [];
      for (const name of files.slice(at, at + BATCH)) {
        const file = join(this.dir, name);
        const entry = parseEntry(await readFile(file, "utf8"));
        if (typeof entry === "string") {
          // Kept aside, not retried and not lost: someone may want to see what it was.
          this.log.warn(`audit spool: ${name} set aside as ${name}${UNREADABLE}: ${entry}`);
          renameSync(file, file + UNREADABLE);
          continue;
        }
        batch.push({ file, entry });
      }
      if (batch.length === 0) continue;
      await this.store.transact(async (tx) => {
        for (const { entry } of batch) await insert(tx, entry);
      });
      for (const { file } of batch) rmSync(file, { force: true });
      fsyncDir(this.dir);
      read += batch.length;
    }
    return read;
  }

  /** Entries being written by commands killed before they acted (never read: those commands did nothing). */
  private removeStale(names: string[]): void {
    // Against the file system's clock, which wrote the mtimes (not the server's, which tests move).
    const now = Date.now();
    for (const name of names) {
      const file = join(this.dir, name);
      try {
        if (now - statSync(file).mtimeMs > STALE_MS) rmSync(file, { force: true });
      } catch {
        // Renamed or removed meanwhile: its command finished.
      }
    }
  }
}
