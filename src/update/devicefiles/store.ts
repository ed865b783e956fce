/*
 * Files that come from devices, under DATA_DIR/multipart/:
 *   parts/<transfer-uuid>_part<i>   uploaded parts of an open file transfer (wiped at start)
 *   <prefix>.downloads/<uuid>       assembled files fetched from devices
 *   <prefix>.actions/<uuid>         action outputs
 * Outside DATA_DIR/storage on purpose: the package storage sweep removes unknown objects there.
 * In a cluster the downloads and outputs are where every node reads them (`shared`): objects
 * `.devicefiles/<key>` of the S3 store, or `<storage.local.dir>/.devicefiles/<key>` (a directory
 * the sweep and the package listing pass over); the parts stay on the node that runs the transfer.
 * Keys are `<dir>/<uuid>` exactly, so nothing else (and no `..`) can ever be named.
 */
import { randomUUID } from "node:crypto";
import { Readable as ReadableStream } from "node:stream";
import type { ObjectStore } from "../../storage/objects.ts";
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

/** Where the stored files of a cluster's nodes are (deviceFilesPlace): an object store, or a directory every node mounts. */
export type SharedFiles = { objects: ObjectStore } | { dir: string };

/** The object key of a device file in a shared object store: a name no package can take. */
export const DEVICE_FILES_PREFIX = ".devicefiles/";

export class DeviceFileStore {
  readonly root: string;
  readonly partsDir: string;
  /** The object store holding the files, when it is not a directory (S3). */
  readonly objects: ObjectStore | undefined;
  /** Where the files are written: `root`, or the directory the nodes share; reads look in `root` too (files from before). */
  private readonly filesRoot: string;
  /** Whether every node of a cluster reads the stored files (so that any node may serve their links). */
  readonly shared: boolean;
  private readonly dirs: Record<ObjectKind, string>;
  private readonly keyPattern: RegExp;
  /** Small action outputs live in the action log, not in files (src/update/actions/store.ts). */
  private inlineActions: ((id: string) => Promise<InlineObject | undefined>) | undefined;

  constructor(dataDir: string, prefix: string, shared?: SharedFiles) {
    this.root = join(dataDir, "multipart");
    this.partsDir = join(this.root, "parts");
    this.objects = shared && "objects" in shared ? shared.objects : undefined;
    this.filesRoot = shared && "dir" in shared ? join(shared.dir, DEVICE_FILES_PREFIX) : this.root;
    this.shared = shared !== undefined;
    this.dirs = { actions: `${prefix}.actions`, downloads: `${prefix}.downloads` };
    this.keyPattern = new RegExp(`^(${this.dirs.actions.replace(".", "\\.")}|${this.dirs.downloads.replace(".", "\\.")})/${UUID}$`);
    // Parts belong to transfers, and transfers do not outlive the process.
    rmSync(this.partsDir, { recursive: true, force: true });
    const roots = [...new Set([this.root, this.filesRoot])];
    for (const dir of [this.partsDir, ...roots.flatMap((root) => Object.values(this.dirs).map((d) => join(root, d)))]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** The file of a key (where it is, else where it would be written), or undefined when the key is not one of ours. */
  pathOf(key: string): string | undefined {
    if (!this.keyPattern.test(key)) return undefined;
    const path = join(this.filesRoot, key);
    if (this.filesRoot === this.root || statFile(path)) return path;
    const before = join(this.root, key);
    return statFile(before) ? before : path;
  }

  /** Whether `key` names a device file (a download or an action output). */
  isKey(key: string): boolean {
    return this.keyPattern.test(key);
  }

  /** The key of a device file in the shared object store. */
  objectKey(key: string): string {
    return `${DEVICE_FILES_PREFIX}${key}`;
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

  /** Stat of a stored file (not in an object store), or undefined. */
  stat(key: string): { path: string; stat: Stats } | undefined {
    return statFile(this.pathOf(key));
  }

  /** Stores bytes durably as a new object; returns its key. */
  async writeObject(kind: ObjectKind, data: Uint8Array): Promise<string> {
    const key = `${this.dirs[kind]}/${randomUUID()}`;
    if (this.objects) await this.objects.put(this.objectKey(key), ReadableStream.from([Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
    else await writeFileDurableAsync(join(this.filesRoot, key), data, 0o600);
    return key;
  }

  /** The first `limit` bytes of a stored object (empty when it is gone) and whether there is more. */
  async readObject(key: string, limit: number): Promise<{ data: Buffer; truncated: boolean }> {
    if (!this.objects) return this.readFile(key, limit);
    if (!this.keyPattern.test(key)) return { data: Buffer.alloc(0), truncated: false };
    const read = await this.objects.read(this.objectKey(key), { range: `bytes=0-${limit}` }).catch(() => undefined);
    if (!read?.body) return { data: Buffer.alloc(0), truncated: false };
    const chunks: Buffer[] = [];
    let length = 0;
    for await (const chunk of read.body as AsyncIterable<Buffer>) {
      chunks.push(chunk);
      length += chunk.length;
      if (length > limit) break;
    }
    read.body.destroy();
    const data = Buffer.concat(chunks);
    return { data: data.subarray(0, Math.min(data.length, limit)), truncated: read.size > limit };
  }

  private readFile(key: string, limit: number): { data: Buffer; truncated: boolean } {
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
    if (this.objects) {
      if (key && this.keyPattern.test(key)) await this.objects.delete(this.objectKey(key)).catch(() => {});
      return;
    }
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
    if (this.objects) {
      const files = parts.map((part) => this.partPath(part));
      try {
        await this.objects.put(this.objectKey(key), ReadableStream.from((async function* () {
          for (const file of files) yield* createReadStream(file);
        })()));
      } finally {
        this.removeParts(parts);
      }
      return key;
    }
    const target = join(this.filesRoot, key);
    const tmp = `${target}.tmp`;
    const out = createWriteStream(tmp, { flags: "wx", mode: 0o600 });
    try {
      for (const part of parts) await pipeline(createReadStream(this.partPath(part)), out, { end: false });
      await new Promise<void>((resolve, reject) => out.end((error?: Error | null) => (error ? reject(error) : resolve())));
      await fsyncFile(tmp);
      await rename(tmp, target);
      fsyncDir(join(this.filesRoot, this.dirs.downloads));
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
  async sweepDownloads(maxAgeSeconds: number, now: number): Promise<number> {
    let removed = 0;
    if (this.objects) {
      for (const object of await this.objects.list(this.objectKey(`${this.dirs.downloads}/`))) {
        if (now - object.modified.getTime() <= maxAgeSeconds * 1000) continue;
        await this.objects.delete(object.key);
        removed++;
      }
      return removed;
    }
    for (const dir of new Set([join(this.root, this.dirs.downloads), join(this.filesRoot, this.dirs.downloads)])) removed += this.sweepDir(dir, maxAgeSeconds, now);
    return removed;
  }

  private sweepDir(dir: string, maxAgeSeconds: number, now: number): number {
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

/**
 * Where device files go: in the S3 store; on PostgreSQL (where several nodes may serve one
 * gateway) with a `storage.local.dir` of its own (the directory the nodes share), there; else
 * only in the data dir, and the node holding the device's socket serves them.
 */
export function deviceFilesPlace(ctx: Pick<AppContext, "config" | "objects">): SharedFiles | undefined {
  if (ctx.objects.driver === "s3") return { objects: ctx.objects };
  if (ctx.config.database.url && ctx.config.storage.local.dir) return { dir: ctx.config.storage.local.dir };
  return undefined;
}
