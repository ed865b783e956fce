import { closeSync, fsyncSync, openSync, renameSync, rmSync, statSync, writeSync, type Stats } from "node:fs";
import { open, rename, rm, unlink } from "node:fs/promises";
import { dirname } from "node:path";
import type { Writable } from "node:stream";

/** Makes a directory entry change (create, rename, unlink) durable. */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Flushes a file's data to disk, through a descriptor of its own: it works whichever descriptor wrote the bytes. */
export async function fsyncFile(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Writes a file atomically and durably: temp file, fsync, rename, directory fsync. A failure leaves the old file. */
export function writeFileDurable(path: string, data: string | Uint8Array, mode = 0o600): void {
  writeViaTemp(path, data, mode, true);
}

/**
 * Writes a file atomically (temp file, rename: a reader sees the old or the new content, never a
 * part) but not durably, for a file that means nothing after a crash: its two fsyncs would
 * lengthen every start, most on flash.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600): void {
  writeViaTemp(path, data, mode, false);
}

function writeViaTemp(path: string, data: string | Uint8Array, mode: number, durable: boolean): void {
  const tmp = `${path}.${process.pid}.tmp`;
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  try {
    const fd = openSync(tmp, "w", mode);
    try {
      let written = 0;
      while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
      if (durable) fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (error) {
    rmSync(tmp, { force: true });
    throw error;
  }
  if (durable) fsyncDir(dirname(path));
}

/**
 * writeFileDurable through libuv's thread pool, for files written while the server runs. Writers
 * in the same directory share its fsync: one that arrives while another's runs waits for the next.
 */
export async function writeFileDurableAsync(path: string, data: Uint8Array, mode = 0o600): Promise<void> {
  const tmp = `${path}.${process.pid}.${++tmpCounter}.tmp`;
  try {
    const handle = await open(tmp, "w", mode);
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, path);
  } catch (error) {
    await rm(tmp, { force: true });
    throw error;
  }
  await syncDirShared(dirname(path));
}

let tmpCounter = 0;
/** Per directory: the fsync that has not started yet, which new callers join. */
const pendingDirSyncs = new Map<string, Promise<void>>();
const runningDirSyncs = new Map<string, Promise<void>>();

/** fsync of a directory, shared by every caller that asks before it starts (group commit for directory entries). */
function syncDirShared(dir: string): Promise<void> {
  const pending = pendingDirSyncs.get(dir);
  if (pending) return pending;
  const before = runningDirSyncs.get(dir) ?? Promise.resolve();
  const mine: Promise<void> = before
    .catch(() => {})
    .then(() => {
      pendingDirSyncs.delete(dir);
      runningDirSyncs.set(dir, mine);
      return syncDirOnce(dir);
    })
    .finally(() => {
      if (runningDirSyncs.get(dir) === mine) runningDirSyncs.delete(dir);
    });
  pendingDirSyncs.set(dir, mine);
  return mine;
}

async function syncDirOnce(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** A regular file and its stat, or undefined when `path` is undefined, missing or not a regular file. */
export function statFile(path: string | undefined): { path: string; stat: Stats } | undefined {
  if (!path) return undefined;
  try {
    const stat = statSync(path);
    return stat.isFile() ? { path, stat } : undefined;
  } catch {
    return undefined;
  }
}

/** At most the first `limit` bytes of a file. */
export async function readHead(path: string, limit: number): Promise<Buffer> {
  const handle = await open(path, "r");
  try {
    const buffer = Buffer.alloc(limit);
    const { bytesRead } = await handle.read(buffer, 0, limit, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/**
 * Removes `path`, which `stream` was writing, once the stream has let go of it. A pipeline that
 * fails early can settle while its destination is still opening the file (seen on Node 20): an
 * unlink before that open completes finds nothing, and the open then leaves the file behind.
 */
export async function removeWritten(stream: Writable, path: string): Promise<void> {
  if (!stream.closed) {
    const closed = new Promise((resolve) => stream.once("close", resolve));
    stream.destroy();
    await closed;
  }
  await unlink(path).catch(() => {});
}
