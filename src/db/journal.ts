import { closeSync, fdatasyncSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
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
  const body = Buffer.from(json, "utf8");
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt32LE(MAGIC, 0);
  header.writeUInt32LE(body.length, 4);
  header.writeUInt32LE(crc32(body), 8);
  return Buffer.concat([header, body]);
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

/**
 * Appends frames and makes them durable. Frames that arrive while an fsync is running are
 * written together by the next round, so concurrent commits share one fsync (group commit).
 * Writes are synchronous syscalls on the main thread but batched, which keeps ordering trivial.
 */
export class JournalWriter {
  readonly path: string;
  private fd: number;
  private size: number;
  private durableSize: number;
  private pending: Buffer[] = [];
  private waiters: Waiter[] = [];
  private scheduled = false;
  private lazyTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly onFailure: (error: Error) => void;
  /** Test hook: lets a test simulate a full disk. */
  failNextWrite: Error | undefined;

  constructor(path: string, onFailure: (error: Error) => void) {
    this.path = path;
    this.onFailure = onFailure;
    this.fd = openSync(path, "a", 0o600);
    this.size = 0;
    this.durableSize = 0;
  }

  get bytes(): number {
    return this.size + this.pending.reduce((n, b) => n + b.length, 0);
  }

  /** Queues a frame; the promise resolves once it is on disk. */
  append(frame: Buffer): Promise<void> {
    if (this.closed) return Promise.reject(new Error("journal is closed"));
    this.pending.push(frame);
    const done = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.schedule();
    return done;
  }

  /** Queues a frame that needs no acknowledgement; it rides with the next commit or a timer. */
  appendLazy(frame: Buffer, delayMs: number): void {
    if (this.closed) return;
    this.pending.push(frame);
    this.lazyTimer ??= setTimeout(() => {
      this.lazyTimer = undefined;
      this.schedule();
    }, delayMs);
    this.lazyTimer.unref();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // setImmediate lets commits made in the same event-loop turn join this round.
    setImmediate(() => {
      this.scheduled = false;
      this.flushNow();
    });
  }

  /** Writes and fsyncs everything queued so far. */
  flushNow(): void {
    if (this.pending.length === 0) return;
    const buffers = this.pending;
    const waiters = this.waiters;
    this.pending = [];
    this.waiters = [];
    try {
      if (this.failNextWrite) {
        const error = this.failNextWrite;
        this.failNextWrite = undefined;
        throw error;
      }
      const batch = buffers.length === 1 ? buffers[0] : Buffer.concat(buffers);
      let written = 0;
      while (written < batch.length) written += writeSync(this.fd, batch, written, batch.length - written);
      fdatasyncSync(this.fd);
      this.size += batch.length;
      this.durableSize = this.size;
    } catch (cause) {
      const error = cause instanceof Error ? cause : new Error(String(cause));
      // Cut any partial frame so the journal ends on a frame boundary again.
      try {
        ftruncateSync(this.fd, this.durableSize);
        this.size = this.durableSize;
      } catch {
        /* the reload that follows reads only intact frames anyway */
      }
      for (const w of waiters) w.reject(error);
      this.onFailure(error);
      return;
    }
    for (const w of waiters) w.resolve();
  }

  /** Rejects everything queued and not yet written (after a failure elsewhere). */
  discardPending(error: Error): void {
    const waiters = this.waiters;
    this.pending = [];
    this.waiters = [];
    for (const w of waiters) w.reject(error);
  }

  close(): void {
    if (this.closed) return;
    if (this.lazyTimer) clearTimeout(this.lazyTimer);
    this.flushNow();
    this.closed = true;
    closeSync(this.fd);
  }
}
