/*
 * The backup file: one tar (ustar, pax for long names), streamed in both directions.
 *
 *   labgate-backup.json   first: what this is ({"format": "labgate-backup", "version": 1, ...})
 *   data/...              the data dir's files (regular files only)
 *   MANIFEST.json         last: {"entries": [{"name", "size", "sha256"}, ...]}, every entry above
 *
 * The manifest comes last because the writer learns the checksums while streaming. A reader
 * accepts the archive only when the manifest is there, lists exactly the entries it read, and
 * every size and SHA-256 matches: a truncated, damaged or spliced file is refused.
 */
import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import type { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import tar from "tar-stream";

export const FORMAT = "labgate-backup";
export const FORMAT_VERSION = 1;
export const INFO_ENTRY = "labgate-backup.json";
export const MANIFEST_ENTRY = "MANIFEST.json";
/** Every data entry's name starts with this; the rest is its path inside the data dir. */
export const DATA_PREFIX = "data/";

const CHUNK = 256 * 1024;
const MAX_INFO_BYTES = 64 * 1024;
const MAX_MANIFEST_BYTES = 256 * 1024 * 1024;
const MAX_NAME = 4096;

/** A backup that cannot be made or read; the message says why. */
export class BackupError extends Error {}

export interface ManifestEntry {
  name: string;
  size: number;
  sha256: string;
}

export interface BackupInfo {
  format: typeof FORMAT;
  version: number;
  created: string;
  labgate: string;
  [key: string]: unknown;
}

/** One file of the archive: bytes in memory, or a file read when its turn comes. */
export type Source = { name: string; mode?: number; mtime?: Date } & ({ data: Uint8Array } | { open: () => Promise<FileHandle | undefined> });

/**
 * Why `name` may not be a data entry, or undefined. Names are `data/` and then plain segments:
 * no empty, `.` or `..` segment, no NUL, no backslash, so an entry can only land inside the
 * directory it is restored into.
 */
export function entryNameProblem(name: string): string | undefined {
  if (!name.startsWith(DATA_PREFIX) || name.length > MAX_NAME) return `entry ${JSON.stringify(name.slice(0, 200))} is not under ${DATA_PREFIX}`;
  for (const segment of name.slice(DATA_PREFIX.length).split("/")) {
    if (segment === "" || segment === "." || segment === ".." || /[\0\\]/.test(segment)) return `entry ${JSON.stringify(name.slice(0, 200))} has an unsafe path`;
  }
  return undefined;
}

/** Resolves when `out` takes more, rejects when it closed or failed first. */
function drained(out: Writable): Promise<void> {
  // A stream destroyed already emits no more events.
  if (out.destroyed) return Promise.reject(new BackupError("the backup's reader went away"));
  return new Promise((resolve, reject) => {
    const done = (error?: Error) => {
      out.off("drain", onDrain);
      out.off("close", onClose);
      out.off("error", done);
      if (error) reject(error);
      else resolve();
    };
    const onDrain = () => done();
    const onClose = () => done(new BackupError("the backup's reader went away"));
    out.on("drain", onDrain);
    out.on("close", onClose);
    out.on("error", done);
  });
}

/** Writes `chunk` to a tar entry (a streamx Writable), waiting while it is full. */
async function put(entry: Writable, chunk: Uint8Array): Promise<void> {
  if (!entry.write(chunk)) await drained(entry);
}

export interface WriteSummary {
  entries: number;
  bytes: number;
}

/**
 * Streams `info`, every source and the manifest into `out` as one tar. A file source is opened
 * when its turn comes (one that is gone by then is left out); its size is taken then and exactly
 * that many bytes are stored (bytes appended later are not, a file cut short is padded with
 * zeros and logged through `warn`). Rejects, leaving `out` destroyed, on the first failure.
 */
export async function writeArchive(
  info: BackupInfo,
  sources: AsyncIterable<Source> | Iterable<Source>,
  out: Writable,
  warn: (message: string) => void = () => {},
): Promise<WriteSummary> {
  const pack = tar.pack();
  const manifest: ManifestEntry[] = [];
  let bytes = 0;
  // The pack's output goes to `out` as `out` takes it: memory stays at a few chunks.
  const forwarding = (async () => {
    for await (const chunk of pack as AsyncIterable<Uint8Array>) {
      if (!out.write(chunk)) await drained(out);
    }
  })();
  forwarding.catch(() => {});

  const addEntry = async (name: string, size: number, mode: number, mtime: Date, fill: (entry: Writable, hash: ReturnType<typeof createHash>) => Promise<void>) => {
    const hash = createHash("sha256");
    let finished!: Promise<void>;
    const entry = await new Promise<Writable>((resolve) => {
      finished = new Promise<void>((done, fail) => {
        resolve(pack.entry({ name, size, mode, mtime, type: "file" }, (error) => (error ? fail(error) : done())) as unknown as Writable);
      });
    });
    finished.catch(() => {});
    await fill(entry, hash);
    entry.end();
    await finished;
    manifest.push({ name, size, sha256: hash.digest("hex") });
    bytes += size;
  };
  const addBytes = (name: string, data: Uint8Array, mode = 0o600, mtime = new Date()) =>
    addEntry(name, data.length, mode, mtime, async (entry, hash) => {
      for (let at = 0; at < data.length; at += CHUNK) {
        const chunk = data.subarray(at, Math.min(at + CHUNK, data.length));
        hash.update(chunk);
        await put(entry, chunk);
      }
    });

  try {
    await addBytes(INFO_ENTRY, Buffer.from(JSON.stringify(info, null, 2) + "\n"), 0o644);
    for await (const source of sources) {
      const problem = entryNameProblem(source.name);
      if (problem) throw new BackupError(problem);
      if ("data" in source) {
        await addBytes(source.name, source.data, source.mode, source.mtime);
        continue;
      }
      const handle = await source.open();
      if (!handle) continue;
      try {
        const stat = await handle.stat();
        if (!stat.isFile()) continue;
        const size = stat.size;
        await addEntry(source.name, size, source.mode ?? stat.mode & 0o777, stat.mtime, async (entry, hash) => {
          let position = 0;
          let short = false;
          while (position < size) {
            const want = Math.min(CHUNK, size - position);
            const { buffer, bytesRead } = await handle.read(Buffer.allocUnsafe(want), 0, want, position);
            let chunk = buffer.subarray(0, bytesRead);
            if (bytesRead === 0) {
              short = true;
              chunk = Buffer.alloc(want);
            }
            hash.update(chunk);
            position += chunk.length;
            await put(entry, chunk);
          }
          if (short) warn(`${source.name} became shorter while it was read; stored padded with zeros to ${size} bytes`);
        });
      } finally {
        await handle.close().catch(() => {});
      }
    }
    await addBytes(MANIFEST_ENTRY, Buffer.from(JSON.stringify({ format: FORMAT, entries: manifest }) + "\n"), 0o644);
    pack.finalize();
    await forwarding;
    await new Promise<void>((resolve, reject) => out.end((error?: Error | null) => (error ? reject(error) : resolve())));
  } catch (error) {
    pack.destroy(error as Error);
    out.destroy(error as Error);
    throw error;
  }
  return { entries: manifest.length, bytes };
}

/** Where a reader puts an entry's bytes (restore: a file), or undefined to only check them. */
export type EntrySink = (name: string, mode: number, mtime: Date | undefined) => Promise<Writable> | undefined;

export interface ReadResult {
  info: BackupInfo;
  entries: ManifestEntry[];
  bytes: number;
}

async function readSmall(stream: AsyncIterable<Uint8Array>, limit: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of stream) {
    length += chunk.length;
    if (length > limit) throw new BackupError(`${what} is larger than ${limit} bytes: not a labgate backup`);
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks);
}

function parseJson(bytes: Buffer, what: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(bytes.toString("utf8"));
    if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    /* below */
  }
  throw new BackupError(`${what} is damaged (not a JSON object)`);
}

function checkManifest(value: Record<string, unknown>): ManifestEntry[] {
  const entries = value.entries;
  const valid =
    Array.isArray(entries) &&
    entries.every(
      (e) =>
        e &&
        typeof e === "object" &&
        typeof e.name === "string" &&
        Number.isSafeInteger(e.size) &&
        e.size >= 0 &&
        typeof e.sha256 === "string" &&
        /^[0-9a-f]{64}$/.test(e.sha256),
    );
  if (!valid) throw new BackupError(`${MANIFEST_ENTRY} is damaged (bad entry list)`);
  return entries as ManifestEntry[];
}

/**
 * Reads a backup from `input`, checking it as it goes, and hands each data entry's bytes to
 * `sink`. Resolves only for a complete, intact backup; otherwise rejects with a BackupError
 * (what the sink received must then be thrown away).
 */
export async function readArchive(input: Readable, sink?: EntrySink): Promise<ReadResult> {
  const extract = tar.extract();
  input.on("error", (error) => extract.destroy(error));
  input.pipe(extract as unknown as Writable);
  let info: BackupInfo | undefined;
  let manifest: ManifestEntry[] | undefined;
  const seen = new Map<string, ManifestEntry>();
  let bytes = 0;
  /** The sink's stream of the entry being read, until it is closed. */
  let current: Writable | undefined;
  try {
    for await (const entry of extract) {
      const { header } = entry;
      const name = header.name;
      if (manifest) throw new BackupError(`entry ${JSON.stringify(name)} after ${MANIFEST_ENTRY}: the backup has been tampered with`);
      if (!info) {
        if (name !== INFO_ENTRY) throw new BackupError(`not a labgate backup (it does not start with ${INFO_ENTRY})`);
        const raw = await readSmall(entry, MAX_INFO_BYTES, INFO_ENTRY);
        const value = parseJson(raw, INFO_ENTRY);
        if (value.format !== FORMAT) throw new BackupError("not a labgate backup (unknown format)");
        if (value.version !== FORMAT_VERSION) throw new BackupError(`backup format version ${String(value.version)} is not supported (this labgate reads ${FORMAT_VERSION})`);
        info = value as BackupInfo;
        seen.set(name, { name, size: raw.length, sha256: createHash("sha256").update(raw).digest("hex") });
        continue;
      }
      if (name === MANIFEST_ENTRY) {
        manifest = checkManifest(parseJson(await readSmall(entry, MAX_MANIFEST_BYTES, MANIFEST_ENTRY), MANIFEST_ENTRY));
        continue;
      }
      if (header.type !== "file") throw new BackupError(`entry ${JSON.stringify(name)} is a ${header.type}: a labgate backup holds regular files only`);
      const problem = entryNameProblem(name);
      if (problem) throw new BackupError(problem);
      if (seen.has(name)) throw new BackupError(`entry ${JSON.stringify(name)} appears twice`);
      const hash = createHash("sha256");
      const target = sink ? await sink(name.slice(DATA_PREFIX.length), (header.mode ?? 0o600) & 0o700, header.mtime) : undefined;
      // Its errors surface through drained() and end(); this keeps one from being unhandled.
      target?.on("error", () => {});
      current = target;
      let size = 0;
      for await (const chunk of entry as AsyncIterable<Uint8Array>) {
        hash.update(chunk);
        size += chunk.length;
        if (target && !target.write(chunk)) await drained(target);
      }
      if (target) await new Promise<void>((resolve, reject) => target.end((error?: Error | null) => (error ? reject(error) : resolve())));
      current = undefined;
      seen.set(name, { name, size, sha256: hash.digest("hex") });
      bytes += size;
    }
  } catch (error) {
    extract.destroy();
    input.unpipe(extract as unknown as Writable);
    input.destroy();
    if (current) {
      // Closed before the caller removes what the sink wrote.
      current.destroy();
      await finished(current).catch(() => {});
    }
    if (error instanceof BackupError) throw error;
    const message = (error as Error).message;
    throw new BackupError(/Unexpected end of data/.test(message) ? "the backup is truncated" : `the backup is damaged (${message})`);
  }
  if (!info) throw new BackupError("the backup is empty");
  if (!manifest) throw new BackupError(`the backup is truncated (no ${MANIFEST_ENTRY} at its end)`);
  const listed = new Set<string>();
  for (const expected of manifest) {
    listed.add(expected.name);
    const got = seen.get(expected.name);
    if (!got) throw new BackupError(`the backup is damaged: ${expected.name} is missing`);
    if (got.size !== expected.size || got.sha256 !== expected.sha256) throw new BackupError(`the backup is damaged: ${expected.name} does not match its checksum`);
  }
  for (const name of seen.keys()) if (!listed.has(name)) throw new BackupError(`the backup is damaged: ${name} is not in ${MANIFEST_ENTRY}`);
  return { info, entries: manifest.filter((e) => e.name !== INFO_ENTRY), bytes };
}
