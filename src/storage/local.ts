import { createHash, randomUUID } from "node:crypto";
import { createReadStream, createWriteStream, mkdirSync, readdirSync, realpathSync, rmSync, statSync, type Stats } from "node:fs";
import { open, rename, unlink } from "node:fs/promises";
import { isAbsolute, join, relative, sep } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fsyncDir, removeWritten, statFile } from "../util/files.ts";
import { collectYoungGarbage } from "../util/gc.ts";
import type { ObjectInfo, ObjectListing, ObjectRead, ObjectStore, ReadRequest } from "./objects.ts";
import { fileEtag, parseRange } from "./range.ts";

/** A storage directory or object name that is not allowed (it could escape the storage dir). */
export class StorageNameError extends Error {}

/** An upload written to the temp area: complete and fsynced, not yet in its final place. */
export interface StagedObject {
  tmpPath: string;
  uuid: string;
  size: number;
  sha256: string;
}

/** An object in its final place. `name` is what `/local_storage/{name}` serves. */
export interface StoredObject {
  uuid: string;
  /** Directory relative to the storage root, `.` for the root. */
  dir: string;
  name: string;
  size: number;
  sha256: string;
}

const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const MAX_DEPTH = 8;
const TMP_DIR = ".tmp";
const WRITE_CHUNK = 1024 * 1024;
/** Bytes of upload between two young-generation collections (see util/gc.ts). */
const COLLECT_EVERY = 4 * 1024 * 1024;

/**
 * Splits a relative path into safe segments. Only plain names are allowed (letters, digits,
 * `.`, `_`, `-`, not starting with a dot), so `..`, absolute paths, backslashes, NUL bytes and
 * the hidden temp area are all refused before the file system is touched.
 */
function segments(path: string, what: string): string[] {
  const parts = path.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.length > MAX_DEPTH) throw new StorageNameError(`${what} is nested too deeply (at most ${MAX_DEPTH} levels)`);
  for (const part of parts) {
    if (!SEGMENT.test(part)) throw new StorageNameError(`${what} ${JSON.stringify(path)} is not allowed: use letters, digits, '.', '_', '-' separated by '/', no '..'`);
  }
  return parts;
}

/**
 * The local storage driver: objects live under `<root>/<directory>/<uuid>` (`storage.local.dir`,
 * by default `DATA_DIR/storage`). This tree belongs to packages (its UUID-named files without a
 * package row are swept at start-up); other features keep their files in their own directories
 * of the data dir. Writes go to a temp file first (hashed on the fly, fsynced), then are renamed
 * into place, so a failed or aborted upload never leaves a visible object. With the S3 driver
 * this is only where uploads are staged before they go to the bucket.
 */
export class LocalStorage implements ObjectStore {
  readonly driver = "local" as const;
  readonly root: string;
  /** Where uploads are staged. */
  readonly tmp: string;
  private readonly rootReal: string;

  /** `node`: the cluster node whose temp area this is, in a directory several nodes share (its own under `.tmp/`). */
  constructor(root: string, node?: string) {
    this.root = root;
    this.tmp = node ? join(this.root, TMP_DIR, node) : join(this.root, TMP_DIR);
    // Whatever is in the temp area belongs to uploads that died with a previous process (of this
    // node: the other nodes' areas are theirs, and a node restarting under its name replaces its process).
    rmSync(this.tmp, { recursive: true, force: true });
    mkdirSync(this.tmp, { recursive: true, mode: 0o700 });
    // Files directly under `.tmp/` are a single server's (a gateway moved onto PostgreSQL): nodes stage only in their own directories there.
    if (node) {
      const shared = join(this.root, TMP_DIR);
      for (const entry of readdirSync(shared, { withFileTypes: true })) if (!entry.isDirectory()) rmSync(join(shared, entry.name), { force: true });
    }
    this.rootReal = realpathSync(this.root);
  }

  /** Normalises an upload's storage directory: `.` for the root, else `a/b`. Throws StorageNameError. */
  normalizeDir(dir: string | undefined): string {
    const parts = segments(dir ?? "", "storage directory");
    return parts.length === 0 ? "." : parts.join("/");
  }

  /** `dir` + uuid as served under `/local_storage/`. */
  static objectName(dir: string, uuid: string): string {
    return dir === "." ? uuid : `${dir}/${uuid}`;
  }

  /** Streams `source` into a temp file, computing SHA-256 as it goes; fsyncs before resolving. */
  async stage(source: Readable): Promise<StagedObject> {
    const uuid = randomUUID();
    const tmpPath = join(this.tmp, uuid);
    const hash = createHash("sha256");
    let size = 0;
    // A second 'data' listener sees every chunk the pipeline writes, without an extra stream hop.
    let sinceCollection = 0;
    source.on("data", (chunk: Buffer) => {
      hash.update(chunk);
      size += chunk.length;
      sinceCollection += chunk.length;
      if (sinceCollection >= COLLECT_EVERY) {
        sinceCollection = 0;
        collectYoungGarbage(); // the chunks already written are garbage: keeps RSS flat
      }
    });
    const file = createWriteStream(tmpPath, { flags: "wx", mode: 0o600, highWaterMark: WRITE_CHUNK });
    try {
      await pipeline(source, file);
      // fsync through a second descriptor: it flushes the file's data whichever fd wrote it.
      const fh = await open(tmpPath, "r");
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
    } catch (error) {
      await removeWritten(file, tmpPath);
      throw error;
    }
    return { tmpPath, uuid, size, sha256: hash.digest("hex") };
  }

  /** Moves a staged object into `dir` (already normalised) and makes the rename durable. */
  async commit(staged: StagedObject, dir: string): Promise<StoredObject> {
    const parts = segments(dir, "storage directory");
    await this.moveIn(staged.tmpPath, parts, staged.uuid);
    return { uuid: staged.uuid, dir: parts.length ? parts.join("/") : ".", name: LocalStorage.objectName(dir, staged.uuid), size: staged.size, sha256: staged.sha256 };
  }

  /** Renames the file at `from` to `<root>/<parts...>/<name>`, making the directories and the rename durable. */
  private async moveIn(from: string, parts: string[], name: string): Promise<void> {
    let current = this.root;
    for (const part of parts) {
      current = join(current, part);
      try {
        mkdirSync(current, { mode: 0o700 });
        fsyncDir(join(current, ".."));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
        // An object (a file) may carry that name already: a directory cannot go there.
        if (!statSync(current).isDirectory()) throw new StorageNameError(`storage directory ${JSON.stringify(parts.join("/"))} names an existing object`);
      }
    }
    this.assertInside(current);
    await rename(from, join(current, name));
    fsyncDir(current);
  }

  async put(key: string, source: Readable): Promise<number> {
    const staged = await this.stage(source);
    await this.putFile(key, staged.tmpPath).catch(async (error: unknown) => {
      await this.discard(staged);
      throw error;
    });
    return staged.size;
  }

  async putFile(key: string, path: string): Promise<void> {
    const parts = segments(key, "object name");
    if (parts.length === 0) throw new StorageNameError("an object needs a name");
    await this.moveIn(path, parts.slice(0, -1), parts[parts.length - 1]!);
  }

  async read(key: string, request: ReadRequest = {}): Promise<ObjectRead | undefined> {
    const object = this.statObject(key);
    if (!object) return undefined;
    const { size, mtime } = object.stat;
    const etag = fileEtag(size, mtime);
    const head = { size, etag, modified: mtime };
    if (request.ifNoneMatch && request.ifNoneMatch.split(",").some((t) => t.trim() === etag || t.trim() === "*")) return { status: 304, ...head };
    const range = request.ifRange && request.ifRange.trim() !== etag ? undefined : parseRange(request.range, size);
    if (range === "unsatisfiable") return { status: 416, ...head };
    const read: ObjectRead = { status: range ? 206 : 200, ...head, ...(range ? { range } : {}) };
    if (!request.head && size > 0) read.body = createReadStream(object.path, { start: range?.start ?? 0, end: range?.end ?? size - 1, highWaterMark: WRITE_CHUNK });
    return read;
  }

  async stat(key: string): Promise<ObjectInfo | undefined> {
    const object = this.statObject(key);
    return object && { size: object.stat.size, modified: object.stat.mtime };
  }

  delete(key: string): Promise<void> {
    return this.remove(key);
  }

  async list(prefix: string): Promise<ObjectListing[]> {
    const out: ObjectListing[] = [];
    for (const key of this.listObjects()) {
      if (!key.startsWith(prefix)) continue;
      const object = this.statObject(key);
      if (object) out.push({ key, size: object.stat.size, modified: object.stat.mtime });
    }
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** The local driver's links are labgate's own (`/local_storage/`). */
  async presign(): Promise<undefined> {
    return undefined;
  }

  /** Drops a staged object (validation failed after the bytes arrived). */
  async discard(staged: StagedObject): Promise<void> {
    await unlink(staged.tmpPath).catch(() => {});
  }

  /** Removes an object; a missing object is fine (the goal is that it is gone). */
  async remove(name: string): Promise<void> {
    const path = this.pathOf(name);
    if (!path) return;
    try {
      await unlink(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      return;
    }
    fsyncDir(join(path, ".."));
  }

  /**
   * The file behind an object name, or undefined when the name is not allowed or escapes the
   * storage dir (also through a symlink).
   */
  pathOf(name: string): string | undefined {
    let parts: string[];
    try {
      parts = segments(name, "object name");
    } catch {
      return undefined;
    }
    if (parts.length === 0) return undefined;
    const path = join(this.root, ...parts);
    try {
      this.assertInside(realpathSync(path));
    } catch {
      return undefined;
    }
    return path;
  }

  /** Stat of a regular file object, or undefined. */
  statObject(name: string): { path: string; stat: Stats } | undefined {
    return statFile(this.pathOf(name));
  }

  /** Every object name on disk (for the start-up sweep of objects that never got a row). */
  listObjects(): string[] {
    const out: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        if (entry.name.startsWith(".")) continue;
        const path = join(dir, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (entry.isFile()) out.push(relative(this.root, path).split(sep).join("/"));
      }
    };
    walk(this.root);
    return out;
  }

  private assertInside(path: string): void {
    const rel = relative(this.rootReal, realpathSync(path));
    if (rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) throw new StorageNameError("path escapes the storage directory");
  }
}
