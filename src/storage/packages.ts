import { randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { unlink } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { LocalStorage, StorageNameError, type StagedObject, type StoredObject } from "./local.ts";
import { TESTRUN_PREFIX, type ObjectStore, type StorageDriver } from "./objects.ts";

/** An object younger than this may be an upload whose row another node has not committed yet: the sweep leaves it. */
const SWEEP_GRACE_MS = 60 * 60 * 1000;

/**
 * Package objects on the configured store: uploads are staged on the local disk first (hashed,
 * their artifact header and signature read from the file), then moved into the store under
 * `<directory>/<uuid>`. On the local driver that move is a rename; on S3 an upload of the file.
 */
export class PackageStorage {
  readonly driver: StorageDriver;
  readonly objects: ObjectStore;
  /** Where uploads are staged: the local driver itself, or a temp area in the data dir. */
  private readonly staging: LocalStorage;

  constructor(objects: ObjectStore, dataDir: string) {
    this.objects = objects;
    this.driver = objects.driver;
    this.staging = objects instanceof LocalStorage ? objects : new LocalStorage(join(dataDir, "storage"));
  }

  /** An upload's storage directory as stored: `.` (local) or `` (S3) for the root, else `a/b`. Throws StorageNameError. */
  normalizeDir(dir: string | undefined): string {
    const normal = this.staging.normalizeDir(dir);
    return this.driver === "s3" && normal === "." ? "" : normal;
  }

  stage(source: Parameters<LocalStorage["stage"]>[0]): Promise<StagedObject> {
    return this.staging.stage(source);
  }

  discard(staged: StagedObject): Promise<void> {
    return this.staging.discard(staged);
  }

  /** Moves a staged object into the store under `dir` (normalised): durable once this resolves. */
  async commit(staged: StagedObject, dir: string): Promise<StoredObject> {
    if (this.objects === this.staging) return this.staging.commit(staged, dir);
    const name = dir === "" ? staged.uuid : `${dir}/${staged.uuid}`;
    await this.objects.putFile(name, staged.tmpPath);
    return { uuid: staged.uuid, dir, name, size: staged.size, sha256: staged.sha256 };
  }

  remove(name: string): Promise<void> {
    return this.objects.delete(name);
  }

  /** The package objects in the store (for the sweep of objects that never got a row); on S3 only those older than an upload could take. */
  async listObjects(now = Date.now()): Promise<string[]> {
    const listed = await this.objects.list("");
    return listed.filter((o) => !o.key.startsWith(TESTRUN_PREFIX) && (this.driver === "local" || now - o.modified.getTime() > SWEEP_GRACE_MS)).map((o) => o.key);
  }

  /**
   * A file holding the object's bytes, for tools that read files (xdelta3 seeks in its base):
   * the object itself on the local driver, else a copy in the temp area that `release` removes.
   */
  async localFile(name: string): Promise<{ path: string; release(): Promise<void> } | undefined> {
    if (this.objects === this.staging) {
      const path = this.staging.statObject(name)?.path;
      return path ? { path, release: async () => undefined } : undefined;
    }
    const read = await this.objects.read(name);
    if (!read?.body) return read && read.size === 0 ? this.emptyCopy() : undefined;
    const path = join(this.staging.tmp, `copy-${randomUUID()}`);
    try {
      await pipeline(read.body, createWriteStream(path, { flags: "wx", mode: 0o600 }));
    } catch (error) {
      await unlink(path).catch(() => undefined);
      throw error;
    }
    return { path, release: () => unlink(path).catch(() => undefined) };
  }

  private async emptyCopy(): Promise<{ path: string; release(): Promise<void> }> {
    const path = join(this.staging.tmp, `copy-${randomUUID()}`);
    await pipeline(async function* () {}, createWriteStream(path, { flags: "wx", mode: 0o600 }));
    return { path, release: () => unlink(path).catch(() => undefined) };
  }

}

export { StorageNameError };
