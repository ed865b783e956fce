import { closeSync, fdatasync, ftruncate, openSync, readFileSync, write } from "node:fs";
import { open } from "node:fs/promises";
import { dirname } from "node:path";
import { crc32 } from "node:zlib";

/**
 * The redo journal: one frame per committed transaction.
 * Frame = magic (4) | payload length (4, LE) | CRC-32 of payload (4, LE) | payload (UTF-8 JSON).
 */
const MAGIC = 0x314a474c; // "LGJ1"
const HEADER_BYTES = 12;

export type SqlParam = string | number | null | Uint8Array;
export type Statement = [sql: string, params: SqlParam[]];
export interface FramePayload {
  seq: number;
  ops: Statement[];
}

function encodeParam(value: SqlParam): unknown {
  return value instanceof Uint8Array ? { $b: Buffer.from(value).toString("base64") } : value;
}

function decodeParam(value: unknown): SqlParam {
  if (value !== null && typeof value === "object" && "$b" in value) {
    return new Uint8Array(Buffer.from(String((value as { $b: string }).$b), "base64"));
  }
  return value as SqlParam;
}

export function encodeFrame(payload: FramePayload): Buffer {
  const json = JSON.stringify({ seq: payload.seq, ops: payload.ops.map(([sql, params]) => [sql, params.map(encodeParam)]) });
  // Header and body in one buffer: a fan-out's frame holds 10,000 rows, and a copy of it is megabytes.
  const length = Buffer.byteLength(json, "utf8");
  const frame = Buffer.allocUnsafe(HEADER_BYTES + length);
  frame.write(json, HEADER_BYTES, "utf8");
  frame.writeUInt32LE(MAGIC, 0);
  frame.writeUInt32LE(length, 4);
  frame.writeUInt32LE(crc32(frame.subarray(HEADER_BYTES)), 8);
  return frame;
}

export interface JournalContents {
  frames: FramePayload[];
  /** Bytes that hold intact frames; anything after is a torn or damaged tail. */
  validBytes: number;
  totalBytes: number;
}

/** Reads every intact frame, stopping at the first torn or damaged one. */
export function readJournal(path: string): JournalContents {
  const data = readFileSync(path);
  const frames: FramePayload[] = [];
  let offset = 0;
  while (offset + HEADER_BYTES <= data.length) {
    if (data.readUInt32LE(offset) !== MAGIC) break;
    const length = data.readUInt32LE(offset + 4);
    const end = offset + HEADER_BYTES + length;
    if (end > data.length) break;
    const body = data.subarray(offset + HEADER_BYTES, end);
    if (crc32(body) !== data.readUInt32LE(offset + 8)) break;
    let raw: { seq: number; ops: [string, unknown[]][] };
    try {
      raw = JSON.parse(body.toString("utf8"));
    } catch {
      break;
    }
    frames.push({ seq: raw.seq, ops: raw.ops.map(([sql, params]) => [sql, params.map(decodeParam)]) });
    offset = end;
  }
  return { frames, validBytes: offset, totalBytes: data.length };
}

interface Waiter {
  resolve(): void;
  reject(error: Error): void;
}

/** write(2) of a whole buffer through libuv's thread pool. */
function writeAll(fd: number, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const step = (offset: number): void => {
      if (offset >= data.length) return resolve();
      write(fd, data, offset, data.length - offset, null, (error, n) => (error ? reject(error) : step(offset + n)));
    };
    step(0);
  });
}

const datasync = (fd: number) => new Promise<void>((resolve, reject) => fdatasync(fd, (error) => (error ? reject(error) : resolve())));
const truncate = (fd: number, size: number) => new Promise<void>((resolve, reject) => ftruncate(fd, size, (error) => (error ? reject(error) : resolve())));

async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Appends frames and makes them durable. The write and the fdatasync run in libuv's thread pool,
 * so the event loop keeps serving while the disk works; frames that arrive meanwhile are written
 * together by the next round, so concurrent commits share one fsync (group commit). One round at a
 * time keeps the frames in order. A writer that follows another (a new journal generation) starts
 * writing only once the previous one has drained, so no frame can be durable while an earlier one
 * is not.
 */
export class JournalWriter {
  readonly path: string;
  private readonly fd: number;
  private size = 0;
  private durableSize = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private waiters: Waiter[] = [];
  private scheduled = false;
  private flushing: Promise<void> | undefined;
  private lazyTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private failed: Error | undefined;
  /** The previous generation's drain, and whether this file's directory entry is durable yet. */
  private after: Promise<void> | undefined;
  private dirSynced = false;
  private readonly onFailure: (error: Error) => void;
  /** Test hook: lets a test simulate a full disk. */
  failNextWrite: Error | undefined;

  constructor(path: string, onFailure: (error: Error) => void, after?: Promise<void>) {
    this.path = path;
    this.onFailure = onFailure;
    this.after = after;
    this.fd = openSync(path, "a", 0o600);
  }

  get bytes(): number {
    return this.size + this.pendingBytes;
  }

  /** Queues a frame; the promise resolves once it is on disk. */
  append(frame: Buffer): Promise<void> {
    if (this.closed || this.failed) return Promise.reject(this.failed ?? new Error("journal is closed"));
    this.queue(frame);
    const done = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.schedule();
    return done;
  }

  /** Queues a frame that needs no acknowledgement; it rides with the next commit or a timer. */
  appendLazy(frame: Buffer, delayMs: number): void {
    if (this.closed || this.failed) return;
    this.queue(frame);
    // Real time, not the app clock: when data reaches the disk (src/db/worker.ts, release).
    this.lazyTimer ??= setTimeout(() => {
      this.lazyTimer = undefined;
      this.schedule();
    }, delayMs);
    this.lazyTimer.unref();
  }

  private queue(frame: Buffer): void {
    this.pending.push(frame);
    this.pendingBytes += frame.length;
  }

  private schedule(): void {
    if (this.scheduled || this.flushing) return;
    this.scheduled = true;
    // setImmediate lets commits made in the same event-loop turn join this round.
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  /** Writes and fsyncs everything queued so far (and what arrives meanwhile); resolves when all of it is on disk or failed. */
  flush(): Promise<void> {
    this.flushing ??= this.rounds().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async rounds(): Promise<void> {
    if (this.after) {
      try {
        await this.after;
      } catch (cause) {
        // The previous generation failed: its failure handler reloads the durable state and rejects what is queued here.
        this.fail(cause, false);
        return;
      } finally {
        this.after = undefined;
      }
    }
    while (this.pending.length > 0 && !this.failed) {
      const buffers = this.pending;
      const waiters = this.waiters;
      this.pending = [];
      this.pendingBytes = 0;
      this.waiters = [];
      const batch = buffers.length === 1 ? buffers[0] : Buffer.concat(buffers);
      try {
        if (this.failNextWrite) {
          const error = this.failNextWrite;
          this.failNextWrite = undefined;
          throw error;
        }
        await writeAll(this.fd, batch);
        this.size += batch.length;
        await datasync(this.fd);
        if (!this.dirSynced) await syncDirectory(dirname(this.path));
        this.dirSynced = true;
        this.durableSize = this.size;
      } catch (cause) {
        // Cut any partial frame so the journal ends on a frame boundary again.
        await truncate(this.fd, this.durableSize).then(
          () => void (this.size = this.durableSize),
          () => {}, // the reload that follows reads only intact frames anyway
        );
        for (const w of waiters) w.reject(this.fail(cause, true));
        return;
      }
      for (const w of waiters) w.resolve();
    }
  }

  private fail(cause: unknown, report: boolean): Error {
    const error = cause instanceof Error ? cause : new Error(String(cause));
    this.failed = error;
    if (report) this.onFailure(error);
    this.discardPending(error);
    return error;
  }

  /** Rejects everything queued and not yet written (after a failure elsewhere). */
  discardPending(error: Error): void {
    const waiters = this.waiters;
    this.pending = [];
    this.pendingBytes = 0;
    this.waiters = [];
    for (const w of waiters) w.reject(error);
  }

  /** Writes what is queued, then closes the file. Rejects if that last write failed. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.lazyTimer) clearTimeout(this.lazyTimer);
    try {
      await this.flush();
    } finally {
      closeSync(this.fd);
    }
    if (this.failed) throw this.failed;
  }
}
