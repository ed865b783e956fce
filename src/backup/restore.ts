import { createWriteStream, mkdirSync, mkdtempSync, readdirSync, renameSync, rmdirSync, rmSync, statSync, utimesSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import type { Readable } from "node:stream";
import type { CopiedTable } from "../db/copy.ts";
import { IMAGE_FILE, IMAGE_SUM_FILE } from "../db/image.ts";
import { refused as connectionRefused, unreachable } from "../db/query/connection-errors.ts";
import { redactedText, redactedUrl } from "../db/url.ts";
import { fsyncDir, fsyncFile } from "../util/files.ts";
import { BackupError, readArchive, type ReadResult } from "./archive.ts";

export interface RestoreOptions {
  /** Adds to the temp directory once the backup checked out, before it becomes the target (the restore's own audit entry). */
  beforeCommit?: (dir: string, result: ReadResult) => void | Promise<void>;
  /** An empty PostgreSQL database that receives the backup's database; the data dir then holds no image. */
  databaseUrl?: string;
  warn?: (message: string) => void;
}

export interface Restored extends ReadResult {
  /** The tables copied into `databaseUrl`'s database, when one was given. */
  copied?: CopiedTable[];
}

/** Why `target` cannot receive a restore (it must be new or an empty directory), or undefined. */
function targetProblem(target: string): string | undefined {
  let isDir: boolean;
  try {
    isDir = statSync(target).isDirectory();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  if (!isDir) return `${target} exists and is not a directory`;
  if (readdirSync(target).length > 0) return `${target} is not empty: restore only into a new or empty directory`;
  return undefined;
}

/**
 * Restores the backup read from `input` into the data dir `target`, which must not exist or be
 * empty. Everything is written into a temp directory next to it (same file system), checked
 * against the backup's manifest, made durable, and only then renamed to `target`: a damaged or
 * truncated backup leaves nothing behind. With `databaseUrl`, the backup's database goes into
 * that empty PostgreSQL database (as `db copy` copies it) before the rename.
 */
export async function restoreBackup(input: Readable, target: string, options: RestoreOptions = {}): Promise<Restored> {
  target = resolve(target);
  const refused = targetProblem(target);
  if (refused) {
    input.destroy();
    throw new BackupError(refused);
  }
  const parent = dirname(target);
  mkdirSync(parent, { recursive: true });
  const temp = mkdtempSync(join(parent, `.${basename(target)}.restore-`));
  const dirs = new Set<string>([temp]);
  const files: Array<{ path: string; mtime: Date | undefined }> = [];
  try {
    const result = await readArchive(input, async (name, mode, mtime) => {
      const parts = name.split("/");
      let dir = temp;
      for (const part of parts.slice(0, -1)) {
        dir = join(dir, part);
        if (dirs.has(dir)) continue;
        mkdirSync(dir, { mode: 0o700 });
        dirs.add(dir);
      }
      const path = join(temp, ...parts);
      files.push({ path, mtime });
      // "wx": a name that is already there (a directory, a duplicate) fails instead of replacing.
      return createWriteStream(path, { flags: "wx", mode: mode || 0o600 });
    });
    for (const { path, mtime } of files) {
      await fsyncFile(path);
      // Test configs show their upload time, which is the file's modification time.
      if (mtime) utimesSync(path, mtime, mtime);
    }
    await options.beforeCommit?.(temp, result);
    const copied = options.databaseUrl ? await imageIntoPostgres(temp, options.databaseUrl, options.warn) : undefined;
    for (const dir of dirs) fsyncDir(dir);
    try {
      rmdirSync(target);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
    renameSync(temp, target);
    fsyncDir(parent);
    return { ...result, copied };
  } catch (error) {
    rmSync(temp, { recursive: true, force: true });
    throw error;
  }
}

/**
 * The image restored into `dir` copied into the empty PostgreSQL database at `url`, then taken out
 * of `dir`: the data dir keeps what is not the database, and a later start without the URL finds
 * no stale copy.
 */
async function imageIntoPostgres(dir: string, url: string, warn: (message: string) => void = () => {}): Promise<CopiedTable[]> {
  const [{ copyToPostgres, CopyRefused }, { migrations }] = await Promise.all([(await import("../db/parts.ts")).loadPostgresPart(), import("../db/index.ts")]);
  let copied: CopiedTable[];
  try {
    copied = await copyToPostgres({ dataDir: dir, url, migrations, warn });
  } catch (error) {
    if (error instanceof CopyRefused) throw new BackupError(error.message);
    if (unreachable(error) || connectionRefused(error)) throw new BackupError(`cannot use ${redactedUrl(url)}: ${redactedText((error as Error).message, url)}`);
    throw error;
  }
  for (const name of [IMAGE_FILE, IMAGE_SUM_FILE]) rmSync(join(dir, name), { force: true });
  return copied;
}
