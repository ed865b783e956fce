import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Database as SqlJsDatabase, SqlJsStatic } from "sql.js";
import { writeFileAtomic } from "../util/files.ts";
import { readJournal } from "./journal.ts";

/**
 * The files of a database directory: the image (labgate.db, which records the journal generation
 * it covers in `_labgate_meta`) and the journals after it (labgate.journal.N). Shared by the
 * server's start-up and the checkpoint worker, which rebuild the same state the same way.
 */
export const IMAGE_FILE = "labgate.db";
/**
 * The SHA-256 of the image as its writer wrote it. An image that matches it is those very bytes
 * and skips SQLite's quick_check at open (a cold quick_check reads the whole image into the page
 * cache on the start's critical path and grows with the database; the sum is cheaper and catches
 * any changed byte, which quick_check does not). Any other image (no sum, a stale one, a
 * restored or copied image) is checked with quick_check as before.
 */
export const IMAGE_SUM_FILE = "labgate.db.sha256";
const JOURNAL_PATTERN = /^labgate\.journal\.(\d+)$/;
export const journalName = (gen: number) => `labgate.journal.${gen}`;
const SQLITE_MAGIC = Buffer.from("SQLite format 3\0", "latin1");
const META_TABLE = "CREATE TABLE IF NOT EXISTS _labgate_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)";

/** A database file or journal that cannot be trusted; the server must not start on it. */
export class DatabaseCorruptError extends Error {}

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

export function journalGenerations(dir: string): number[] {
  return readdirSync(dir)
    .map((name) => JOURNAL_PATTERN.exec(name)?.[1])
    .filter((g): g is string => g !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
}

/** The connection settings that statements (and their replay) depend on. */
function configure(sql: SqlJsDatabase): void {
  // Replay must cascade exactly as the original statements did.
  sql.run("PRAGMA foreign_keys = ON");
  // SQLite's own rollback journal would be a file in sql.js's in-memory file system, created,
  // written and deleted by every transaction. Durability comes from the redo journal, and a
  // crash loses the in-memory database anyway, so the rollback journal can live in memory.
  sql.run("PRAGMA journal_mode = MEMORY");
  // Nothing else opens this in-memory file: holding the lock spares every statement SQLite's check
  // for another connection's hot journal (a file-system lookup in sql.js), about 6x on a point read.
  sql.run("PRAGMA locking_mode = EXCLUSIVE");
}

/** Opens the image of `dir` (or an empty database when there is none) and the journal generation it covers. */
export function openImage(SQL: SqlJsStatic, dir: string): { sql: SqlJsDatabase; generation: number; exists: boolean } {
  const path = join(dir, IMAGE_FILE);
  if (!existsSync(path)) {
    const sql = new SQL.Database();
    sql.run(META_TABLE);
    configure(sql);
    return { sql, generation: 0, exists: false };
  }
  const bytes = readFileSync(path);
  checkImage(path, bytes);
  let sql: SqlJsDatabase | undefined;
  try {
    sql = new SQL.Database(bytes);
    const sum = imageSum(bytes);
    if (readImageSum(dir) !== sum) {
      const check = sql.exec("PRAGMA quick_check")[0]?.values[0]?.[0];
      if (check !== "ok") throw new Error(String(check));
      // Checked now: the next start need not check these bytes again (an image of an older
      // version, or one restored from a backup).
      writeImageSum(dir, sum);
    }
    sql.run(META_TABLE);
    const row = sql.exec("SELECT value FROM _labgate_meta WHERE key = 'generation'")[0]?.values[0]?.[0];
    configure(sql);
    return { sql, generation: row === undefined ? 0 : Number(row), exists: true };
  } catch (error) {
    sql?.close();
    if (error instanceof DatabaseCorruptError) throw error;
    throw new DatabaseCorruptError(`${path} is damaged (${(error as Error).message}); refusing to start and leaving it untouched`);
  }
}

export interface Replayed {
  /** The last generation replayed (the image's own when there was none after it). */
  generation: number;
  seq: number;
  frames: number;
}

/** Replays the intact frames of every journal after `imageGeneration` (up to `upTo`), in order; a gap or a frame that fails is corruption. */
export function replayJournals(
  sql: SqlJsDatabase,
  dir: string,
  imageGeneration: number,
  upTo = Infinity,
  warn: (message: string) => void = () => {},
): Replayed {
  let expected = imageGeneration + 1;
  let seq = 0;
  let count = 0;
  for (const gen of journalGenerations(dir)) {
    if (gen <= imageGeneration) continue; // already inside the image; removed by the next checkpoint
    if (gen > upTo) break;
    const path = join(dir, journalName(gen));
    if (gen !== expected) throw new DatabaseCorruptError(`journal generation ${expected} is missing before ${path}; refusing to start`);
    const { frames, validBytes, totalBytes } = readJournal(path);
    if (validBytes < totalBytes) warn(`${path}: ignoring ${totalBytes - validBytes} bytes of torn journal tail`);
    for (const frame of frames) {
      sql.run("BEGIN");
      try {
        for (const [text, params] of frame.ops) sql.run(text, params);
        sql.run("COMMIT");
      } catch (error) {
        sql.run("ROLLBACK");
        throw new DatabaseCorruptError(`${path}: frame ${frame.seq} does not replay (${(error as Error).message}); refusing to start`);
      }
      seq = frame.seq;
      count += 1;
    }
    expected = gen + 1;
  }
  if (upTo !== Infinity && expected !== upTo + 1) throw new DatabaseCorruptError(`journal generation ${expected} is missing`);
  return { generation: expected - 1, seq, frames: count };
}

/** The image sum of `image`: its SHA-256, in hex. */
export const imageSum = (image: Uint8Array) => createHash("sha256").update(image).digest("hex");

function readImageSum(dir: string): string | undefined {
  try {
    return readFileSync(join(dir, IMAGE_SUM_FILE), "latin1").trim();
  } catch {
    return undefined;
  }
}

/**
 * Records the sum (imageSum) of the image just written durably to `dir`, or just checked. Atomic
 * but not durable, and a sum that cannot be written is let be: a sum that a crash loses or leaves
 * stale, or an old one left in place, matches no other image, so the next start only runs
 * quick_check. The image, already on disk, stands.
 */
export function writeImageSum(dir: string, sum: string): void {
  try {
    writeFileAtomic(join(dir, IMAGE_SUM_FILE), `${sum}\n`);
  } catch {
    /* the next open checks the image with quick_check */
  }
}

/** Records in the image which journal generations it covers; done just before an export. */
export function markGeneration(sql: SqlJsDatabase, generation: number): void {
  sql.run("INSERT INTO _labgate_meta (key, value) VALUES ('generation', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", [
    String(generation),
  ]);
}
