/*
 * A run's report and artifacts on a shared object store (storage.driver: s3): copied there when
 * the run ends, under `.testrun/reports/<id>.*` and `.testrun/artifacts/<id>/<name>`, so that
 * every node serves them. The node that ran it keeps its files and serves them from disk; another
 * node fetches the report files into its reports directory on first read (the report's readers
 * work on files) and streams artifacts from the store. The local driver needs none of this: its
 * directories are the shared place (test_server.*_dir on a shared mount).
 */
import { randomUUID } from "node:crypto";
import { createReadStream, createWriteStream, existsSync } from "node:fs";
import { rename, unlink } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import type { ObjectStore } from "../../storage/objects.ts";
import { TESTRUN_PREFIX } from "../../storage/objects.ts";
import { rfc822 } from "../../util/time.ts";
import type { Artifact } from "../schema.ts";
import { listArtifacts } from "./artifacts.ts";
import { artifactsDir, reportDetailsPath, reportIndexPath, reportPath, type TestrunDirs } from "../paths.ts";

const reportFiles = (dirs: TestrunDirs, id: string): Array<[key: string, path: string]> => [
  [`${TESTRUN_PREFIX}reports/${id}.csv`, reportPath(dirs, id)],
  [`${TESTRUN_PREFIX}reports/${id}.rows`, reportIndexPath(dirs, id)],
  [`${TESTRUN_PREFIX}reports/${id}.details`, reportDetailsPath(dirs, id)],
];

const artifactsPrefix = (id: string) => `${TESTRUN_PREFIX}artifacts/${id}/`;

/** The store's key of a run's artifact, or undefined for a name that is not a plain relative path. */
export function artifactKey(id: string, name: string): string | undefined {
  const segments = name.split("/");
  if (name.includes("\0") || name.includes("\\") || segments.some((s) => s === "" || s === "." || s === "..")) return undefined;
  return `${artifactsPrefix(id)}${name}`;
}

/** The store when it is shared by the nodes (S3), else undefined. */
export const sharedStore = (objects: ObjectStore): ObjectStore | undefined => (objects.driver === "s3" ? objects : undefined);

/** Copies a run's report files and artifacts to the shared store (each file streamed, one at a time). */
export async function publishRun(objects: ObjectStore, dirs: TestrunDirs, id: string): Promise<void> {
  for (const [key, path] of reportFiles(dirs, id)) {
    if (existsSync(path)) await objects.put(key, createReadStream(path));
  }
  const dir = artifactsDir(dirs, id);
  for (const artifact of await listArtifacts(dir)) {
    const key = artifactKey(id, artifact.name);
    if (key) await objects.put(key, createReadStream(`${dir}/${artifact.name}`));
  }
}

/**
 * Makes sure this node has the run's report files: fetched from the shared store into the reports
 * directory (each through a temp name, so a reader never sees half a file) when they are not here.
 */
export async function fetchReport(objects: ObjectStore, dirs: TestrunDirs, id: string): Promise<void> {
  if (existsSync(reportPath(dirs, id))) return;
  // The CSV goes last: its presence says the others are here too.
  for (const [key, path] of reportFiles(dirs, id).reverse()) {
    const read = await objects.read(key);
    if (!read) continue;
    const temporary = `${path}.${randomUUID()}.tmp`;
    try {
      await pipeline(read.body ?? (async function* () {})(), createWriteStream(temporary, { flags: "wx", mode: 0o600 }));
      await rename(temporary, path);
    } catch (error) {
      await unlink(temporary).catch(() => undefined);
      throw error;
    }
  }
}

/** A run's artifacts as the shared store holds them. */
export async function sharedArtifacts(objects: ObjectStore, id: string): Promise<Artifact[]> {
  const prefix = artifactsPrefix(id);
  return (await objects.list(prefix)).map((o) => ({ name: o.key.slice(prefix.length), created: rfc822(o.modified, "+0000") }));
}

/** Removes a run's objects from the shared store. */
export async function removeRunObjects(objects: ObjectStore, id: string): Promise<void> {
  for (const [key] of reportFiles({ configs: "", reports: "", artifacts: "", results: "" }, id)) await objects.delete(key);
  for (const object of await objects.list(artifactsPrefix(id))) await objects.delete(object.key);
}
