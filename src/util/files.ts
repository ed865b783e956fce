import { closeSync, fsyncSync, openSync, renameSync, rmSync, statSync, writeSync, type Stats } from "node:fs";
import { open, rename, rm } from "node:fs/promises";
import { dirname } from "node:path";

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
  const tmp = `${path}.${process.pid}.tmp`;
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  try {
    const fd = openSync(tmp, "w", mode);
    try {
      let written = 0;
      while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (error) {
    rmSync(tmp, { force: true });
    throw error;
  }
  fsyncDir(dirname(path));
}

/** writeFileDurable through libuv's thread pool, for large files written while the server runs. */
export async function writeFileDurableAsync(path: string, data: Uint8Array, mode = 0o600): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
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
  const dir = await open(dirname(path), "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
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
