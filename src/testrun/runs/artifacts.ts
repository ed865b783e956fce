import { constants, type Stats } from "node:fs";
import { lstat, open, readdir, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { rfc822 } from "../../util/time.ts";

import type { Artifact } from "../schema.ts";

/** Every regular file under the run's directory, `/`-separated names, sorted; symlinks never. */
export async function listArtifacts(dir: string): Promise<Artifact[]> {
  const out: Artifact[] = [];
  const walk = async (path: string, prefix: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(path, { withFileTypes: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
      throw error;
    }
    for (const entry of entries) {
      const name = prefix ? `${prefix}/${entry.name}` : entry.name;
      if (entry.isDirectory()) await walk(join(path, entry.name), name);
      else if (entry.isFile()) {
        const stat = await lstat(join(path, entry.name)).catch(() => undefined);
        if (stat?.isFile()) out.push({ name, created: rfc822(stat.mtime, "+0000") });
      }
    }
  };
  await walk(dir, "");
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export interface OpenArtifact {
  handle: FileHandle;
  stat: Stats;
  /** Last path segment, for Content-Disposition. */
  basename: string;
}

/**
 * Opens `name` (already percent-decoded, `/`-separated) inside `dir`, or undefined. Refuses
 * empty, `.` and `..` segments, NUL, and any symlink on the way (every directory is lstat'ed and
 * the file is opened with O_NOFOLLOW), so nothing outside the run's directory is ever served.
 */
export async function openArtifact(dir: string, name: string): Promise<OpenArtifact | undefined> {
  if (name.includes("\0") || name.includes("\\")) return undefined;
  const segments = name.split("/");
  if (segments.length === 0 || segments.some((s) => s === "" || s === "." || s === "..")) return undefined;
  let path = dir;
  for (const segment of segments.slice(0, -1)) {
    path = join(path, segment);
    const stat = await lstat(path).catch(() => undefined);
    if (!stat?.isDirectory()) return undefined;
  }
  path = join(path, segments[segments.length - 1]);
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  const stat = await handle.stat();
  if (!stat.isFile()) {
    await handle.close();
    return undefined;
  }
  const basename = segments[segments.length - 1];
  return { handle, stat, basename };
}
