/*
 * What a backup holds, taken from a data dir whose database is open in this process (the
 * running server's, or the CLI's own when no server runs), so it is consistent by construction:
 *
 * - the database: an image of everything committed (Store.exportImage: on PostgreSQL its rows in a
 *   fresh embedded image, so that one archive format restores into either engine), no journals;
 * - package objects: exactly the objects of the packages in that image. Objects never change
 *   once their row exists (the file is renamed into place before the row commits, and removed
 *   only after the row is gone, never while a backup takes its snapshot), so in the same step as
 *   the image each one is hard-linked into a staging directory: a package deleted while the backup streams keeps its
 *   bytes in the backup, an upload that commits later is not in the image and not in the backup;
 * - everything else in the data dir (keys and secrets, test configs, reports, artifacts, action
 *   outputs), read file by file as the stream reaches it; runs still going at that moment are
 *   restored as runs a restart interrupted. Left out: the journals, the lock, server.url, temp
 *   files, parts of open device transfers and files fetched from devices (their links expire);
 * - test-run directories configured outside the data dir (test_server.configs_dir, ...), stored
 *   as data/testrun/configs, reports and artifacts.
 */
import { localStorageDir } from "../storage/open.ts";
import { linkSync, mkdirSync, mkdtempSync, readdirSync, rmSync, constants as fsConstants } from "node:fs";
import { open, opendir } from "node:fs/promises";
import { isAbsolute, join, relative, sep } from "node:path";
import type { Writable } from "node:stream";
import type { Config } from "../config/config.ts";
import { hasTable, IMAGE_FILE, IMAGE_SUM_FILE } from "../db/index.ts";
import type { ImageReader, Store } from "../db/store.ts";
import { holdingObjectRemovals, storedNamesIn } from "../update/packages/packages.ts";
import { LOCK_FILE } from "../util/lock.ts";
import { testrunDirs } from "../testrun/paths.ts";
import { VERSION } from "../version.ts";
import { DATA_PREFIX, FORMAT, FORMAT_VERSION, writeArchive, type BackupInfo, type Source, type WriteSummary } from "./archive.ts";
import { isoTime } from "../util/time.ts";

/** Written by a running server; a restored data dir must not claim a server. Same as start.ts's SERVER_URL_FILE. */
const SERVER_URL_FILE = "server.url";
const STORAGE_DIR = "storage";
const STAGING_PREFIX = ".backup-";
/** Staging directories of backups in progress in this process (others are left over from a crash). */
const activeStaging = new Set<string>();

export interface BackupSource {
  config: Config;
  store: Store;
  /** Whether a server runs on the data dir (recorded in the backup's info). */
  serverRunning: boolean;
  /** The backup's `created` time. */
  now: Date;
  warn?: (message: string) => void;
}

/** Whether `path` (relative to the data dir, `/`-separated) stays out of a backup. */
function excluded(path: string, prefix: string): boolean {
  if (path === IMAGE_FILE || path === IMAGE_SUM_FILE || path === LOCK_FILE || path === SERVER_URL_FILE || path === STORAGE_DIR) return true;
  if (/^labgate\.journal\.\d+$/.test(path) || /^labgate\.db\..*\.tmp$/.test(path)) return true;
  if (path === "multipart/parts" || path === `multipart/${prefix}.downloads`) return true;
  const name = path.slice(path.lastIndexOf("/") + 1);
  // Temp files of atomic writes (util/files.ts) and of config uploads.
  return /\.\d+\.tmp$/.test(name) || name.startsWith(".upload-");
}

const inside = (dir: string, path: string) => {
  const rel = relative(dir, path);
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel));
};

/** Regular files under `dir`, depth first in name order, as sources named `base/<relative path>`; symlinks are not followed. */
async function* walk(dir: string, base: string, skip: (rel: string) => boolean, rel = ""): AsyncGenerator<Source> {
  let handle;
  try {
    handle = await opendir(join(dir, rel));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  const entries = [];
  for await (const entry of handle) entries.push(entry);
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of entries) {
    const path = rel ? `${rel}/${entry.name}` : entry.name;
    if (skip(path)) continue;
    if (entry.isDirectory()) yield* walk(dir, base, skip, path);
    else if (entry.isFile()) yield fileSource(`${base}${path}`, join(dir, ...path.split("/")));
  }
}

/** A file opened when its turn comes (never through a symlink); undefined when it is gone by then. */
function fileSource(name: string, path: string): Source {
  return {
    name,
    open: () =>
      open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW).catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT" || error.code === "ELOOP") return undefined;
        throw error;
      }),
  };
}

/**
 * Hard-links the object of every package in the image into a fresh staging directory (see the
 * top of this file). Synchronous with the snapshot: nothing can commit or delete in between.
 */
function stagePackageObjects(root: string, db: ImageReader, warn: (message: string) => void): { dir: string; objects: Array<[name: string, staged: string]> } {
  mkdirSync(root, { recursive: true, mode: 0o700 });
  for (const name of readdirSync(root)) {
    const path = join(root, name);
    if (name.startsWith(STAGING_PREFIX) && !activeStaging.has(path)) rmSync(path, { recursive: true, force: true });
  }
  const dir = mkdtempSync(join(root, STAGING_PREFIX));
  activeStaging.add(dir);
  const names = hasTable(db, "packages") ? storedNamesIn(db) : [];
  const objects: Array<[string, string]> = [];
  for (const [i, name] of names.entries()) {
    const staged = join(dir, String(i));
    try {
      linkSync(join(root, ...name.split("/")), staged);
      objects.push([name, staged]);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      warn(`package object ${name} is missing from ${root}; the backup holds its row without it`);
    }
  }
  return { dir, objects };
}

/** A backup whose consistent state is taken: `write` streams it once (or `discard` drops it). */
export interface Snapshot {
  write(out: Writable): Promise<WriteSummary>;
  discard(): void;
}

/**
 * Takes the state to back up from the data dir `source.config.data_dir` (whose database is
 * `source.store`): see the top of this file for what it holds and why it is consistent. Throws
 * DatabaseUnavailableError when the database cannot be read.
 */
export async function takeSnapshot(source: BackupSource): Promise<Snapshot> {
  const { config, store } = source;
  const warn = source.warn ?? (() => {});
  const dataDir = config.data_dir;
  // One step: the image, and the objects of exactly the packages it holds.
  const objectsDir = localStorageDir(config);
  const { image, durable, alongside: staging } = await holdingObjectRemovals(objectsDir, () => store.exportImage((db) => stagePackageObjects(objectsDir, db, warn)));
  const discard = () => {
    rmSync(staging.dir, { recursive: true, force: true });
    activeStaging.delete(staging.dir);
  };
  const dirs = testrunDirs(config);
  const external = [
    { dir: dirs.configs, as: "testrun/configs/" },
    { dir: dirs.reports, as: "testrun/reports/" },
    { dir: dirs.artifacts, as: "testrun/artifacts/" },
  ].filter(({ dir }, i, all) => !inside(dataDir, dir) && all.findIndex((d) => d.dir === dir) === i);
  const info: BackupInfo = {
    format: FORMAT,
    version: FORMAT_VERSION,
    created: isoTime(source.now),
    labgate: VERSION,
    data_dir: dataDir,
    server_running: source.serverRunning,
    packages: staging.objects.length,
    ...(external.length ? { moved_into_data_dir: Object.fromEntries(external.map(({ dir, as }) => [dir, as])) } : {}),
  };
  async function* sources(): AsyncGenerator<Source> {
    // Nothing goes out that is not on disk on the server too.
    await durable;
    yield { name: `${DATA_PREFIX}${IMAGE_FILE}`, data: image, mode: 0o600 };
    for (const [name, staged] of staging.objects) yield { ...fileSource(`${DATA_PREFIX}${STORAGE_DIR}/${name}`, staged), mode: 0o600 };
    // A test-run directory configured elsewhere replaces the data dir's own (left over from before).
    const replaced = new Set(external.map(({ as }) => as.slice(0, -1)));
    yield* walk(dataDir, DATA_PREFIX, (path) => excluded(path, config.prefix) || replaced.has(path));
    for (const { dir, as } of external) yield* walk(dir, `${DATA_PREFIX}${as}`, (path) => path.split("/").pop()!.startsWith(".upload-"));
  }
  return {
    write: async (out) => {
      try {
        return await writeArchive(info, sources(), out, warn);
      } finally {
        discard();
      }
    },
    discard,
  };
}
