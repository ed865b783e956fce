/*
 * Files that come from devices, under DATA_DIR/multipart/:
 *   parts/<transfer-uuid>_part<i>   uploaded parts of an open file transfer (wiped at start)
 *   <prefix>.downloads/<uuid>       assembled files fetched from devices
 *   <prefix>.actions/<uuid>         action outputs
 * Outside DATA_DIR/storage on purpose: the package storage sweep removes unknown objects there.
 * Keys are `<dir>/<uuid>` exactly, so nothing else (and no `..`) can ever be named.
 */
import { randomUUID } from "node:crypto";
import { closeSync, createReadStream, createWriteStream, mkdirSync, openSync, readdirSync, readSync, rmSync, statSync, unlinkSync, type Stats } from "node:fs";
import { rename, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { AppContext } from "../../app/context.ts";
import { fsyncDir, fsyncFile, removeWritten, statFile, writeFileDurableAsync } from "../../util/files.ts";

export const MULTIPART_LINK = "local_storage_multipart";
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
export const PART_NAME = new RegExp(`^(${UUID})_part(\\d{1,5})$`);

export type ObjectKind = "actions" | "downloads";

export class DeviceFileStore {
  readonly root: string;
  readonly partsDir: string;
  private readonly dirs: Record<ObjectKind, string>;
  private readonly keyPattern: RegExp;
  /** Small action outputs live in the action log, not in files (src/update/actions/store.ts). */
  private inlineActions: ((id: string) => Promise<InlineObject | undefined>) | undefined;

  constructor(dataDir: string, prefix: string) {
    this.root = join(dataDir, "multipart");
    this.partsDir = join(this.root, "parts");
    this.dirs = { actions: `${prefix}.actions`, downloads: `${prefix}.downloads` };
    this.keyPattern = new RegExp(`^(${this.dirs.actions.replace(".", "\\.")}|${this.dirs.downloads.replace(".", "\\.")})/${UUID}$`);
    // Parts belong to transfers, and transfers do not outlive the process.
    rmSync(this.partsDir, { recursive: true, force: true });
    for (const dir of [this.partsDir, ...Object.values(this.dirs).map((d) => join(this.root, d))]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** The file of a key, or undefined when the key is not one of ours. */
  pathOf(key: string): string | undefined {
    return this.keyPattern.test(key) ? join(this.root, key) : undefined;
  }

  /** The key an action output kept in the action log answers to: `<prefix>.actions/<execution id>`. */
  actionOutputKey(executionId: string): string {
    return `${this.dirs.actions}/${executionId}`;
  }

  /** Where action outputs that are not files come from (the action service). */
  serveInlineActions(source: (executionId: string) => Promise<InlineObject | undefined>): void {
    this.inlineActions = source;
  }

  /** An action output kept in the action log under `key`, or undefined. */
  async inlineObject(key: string): Promise<InlineObject | undefined> {
    const prefix = `${this.dirs.actions}/`;
    if (!this.keyPattern.test(key) || !key.startsWith(prefix)) return undefined;
    return this.inlineActions?.(key.slice(prefix.length));
  }

  /** Stat of a stored object, or undefined. */
  stat(key: string): { path: string; stat: Stats } | undefined {
    return statFile(this.pathOf(key));
  }

  /** Stores bytes durably as a new object; returns its key. */
  async writeObject(kind: ObjectKind, data: Uint8Array): Promise<string> {
    const key = `${this.dirs[kind]}/${randomUUID()}`;
    await writeFileDurableAsync(join(this.root, key), data, 0o600);
    return key;
  }

  /** The first `limit` bytes of a stored object (empty when it is gone) and whether there is more. */
  readObject(key: string, limit: number): { data: Buffer; truncated: boolean } {
    const path = this.pathOf(key);
    if (!path) return { data: Buffer.alloc(0), truncated: false };
    let fd: number | undefined;
    try {
      fd = openSync(path, "r");
      const buffer = Buffer.alloc(limit + 1);
      const read = readSync(fd, buffer, 0, limit + 1, 0);
      return { data: buffer.subarray(0, Math.min(read, limit)), truncated: read > limit };
    } catch {
      return { data: Buffer.alloc(0), truncated: false };
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
  }

  async remove(key: string | null | undefined): Promise<void> {
    const path = key ? this.pathOf(key) : undefined;
    if (path) await unlink(path).catch(() => {});
  }

  partPath(name: string): string {
    return join(this.partsDir, name);
  }

  /** Streams a part body to its file (temp name, fsync, rename); returns the byte count. */
  async writePart(name: string, body: Readable, limit: number): Promise<number> {
    const final = this.partPath(name);
    const tmp = `${final}.tmp`;
    let size = 0;
    const counter = async function* (source: AsyncIterable<Buffer>) {
      for await (const chunk of source) {
        size += chunk.length;
        if (size > limit) throw new PartTooLargeError(`part is larger than the part size (${limit} bytes)`);
        yield chunk;
      }
    };
    const file = createWriteStream(tmp, { flags: "w", mode: 0o600 });
    try {
      await pipeline(body, counter, file);
      await fsyncFile(tmp);
      await rename(tmp, final);
    } catch (error) {
      await removeWritten(file, tmp);
      throw error;
    }
    return size;
  }

  /** Concatenates the parts in order into a new download object; the parts are removed. */
  async assemble(parts: string[]): Promise<string> {
    const key = `${this.dirs.downloads}/${randomUUID()}`;
    const target = join(this.root, key);
    const tmp = `${target}.tmp`;
    const out = createWriteStream(tmp, { flags: "wx", mode: 0o600 });
    try {
      for (const part of parts) await pipeline(createReadStream(this.partPath(part)), out, { end: false });
      await new Promise<void>((resolve, reject) => out.end((error?: Error | null) => (error ? reject(error) : resolve())));
      await fsyncFile(tmp);
      await rename(tmp, target);
      fsyncDir(join(this.root, this.dirs.downloads));
    } catch (error) {
      await removeWritten(out, tmp);
      throw error;
    } finally {
      this.removeParts(parts);
    }
    return key;
  }

  removeParts(parts: string[]): void {
    for (const part of parts) {
      for (const path of [this.partPath(part), `${this.partPath(part)}.tmp`]) {
        try {
          unlinkSync(path);
        } catch {
          // Never uploaded, or already gone.
        }
      }
    }
  }

  /** Removes downloads older than `maxAgeSeconds` (their links have expired by then). */
  sweepDownloads(maxAgeSeconds: number, now: number): number {
    const dir = join(this.root, this.dirs.downloads);
    let removed = 0;
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      try {
        if (now - statSync(path).mtimeMs > maxAgeSeconds * 1000) {
          unlinkSync(path);
          removed++;
        }
      } catch {
        // Raced with another removal.
      }
    }
    return removed;
  }
}

/** Bytes stored elsewhere than a file, with the time they were written (for ETag and Last-Modified). */
export interface InlineObject {
  data: Uint8Array;
  modified: Date;
}

export class PartTooLargeError extends Error {}

/** A signed, expiring link to a device file or action output. */
export function signedFileUrl(ctx: Pick<AppContext, "config" | "tokens">, base: string, key: string): string {
  const { expires, signature } = ctx.tokens.signLink(MULTIPART_LINK, key, ctx.config.update_server.download_link_ttl);
  return `${base}/local_storage_multipart/multipart/${key}?expires=${expires}&signature=${signature}`;
}
