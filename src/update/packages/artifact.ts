import { createReadStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { createGunzip, gunzipSync } from "node:zlib";
import type { Readable } from "node:stream";
import { readArtifact } from "../../artifact/mender/reader.ts";
import { grantsAny, scopeName, type Scope } from "../../auth/scopes.ts";

/**
 * Upload scope from the artifact's payload types: a device artifact is a tar holding `header.tar`,
 * whose `header-info` JSON lists `payloads[*].type`. Anything that is not such an artifact is
 * `nonstandard`.
 */
export const NONSTANDARD = "nonstandard";

/** Scopes (besides admin_rw) that may upload a payload type; [] means admin_rw only. */
export function scopesForPayload(type: string): Scope[] {
  switch (type) {
    case "single-file":
      return ["upload_single_file"];
    case "rootfs-image":
    case "delta-rootfs-image": // the documented intent
      return ["upload_rootfs_image"];
    case NONSTANDARD:
      return ["upload_nonstandard_artifact"];
    default:
      return [];
  }
}

/** Why a token may not upload an artifact with these payload types, or undefined. */
export function uploadScopeRefusal(granted: ReadonlySet<Scope>, types: readonly string[], prefix: string): string | undefined {
  // No type at all is not "nothing to check": it is an artifact of unknown type.
  for (const type of types.length > 0 ? types : [NONSTANDARD]) {
    const acceptable: Scope[] = ["admin_rw", ...scopesForPayload(type)];
    if (!grantsAny(granted, acceptable)) {
      return `user does not have permission to upload this package type. One of the scopes is required: ${acceptable.map((s) => scopeName(prefix, s)).join(", ")}`;
    }
  }
  return undefined;
}

const BLOCK = 512;
const MAX_MEMBERS = 16; // header.tar is the 3rd member of a real artifact; do not walk a huge tar
const MAX_HEADER_BYTES = 16 * 1024 * 1024;
/** An artifact's header comes before its data; a compressed tar is not decompressed further than this to find it. */
const MAX_STREAM_SKIP = 64 * 1024 * 1024;

/** Sequential byte reader over a file (seeking past data) or a stream (decompressed gzip). */
interface ByteSource {
  read(n: number): Promise<Buffer>;
  skip(n: number): Promise<void>;
  close(): Promise<void>;
}

function fileSource(fh: FileHandle): ByteSource {
  let position = 0;
  return {
    async read(n) {
      const buffer = Buffer.alloc(n);
      const { bytesRead } = await fh.read(buffer, 0, n, position);
      position += bytesRead;
      return buffer.subarray(0, bytesRead);
    },
    async skip(n) {
      position += n;
    },
    close: () => fh.close(),
  };
}

function streamSource(stream: Readable): ByteSource {
  const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  let pending: Buffer = Buffer.alloc(0);
  let done = false;
  let skipped = 0;
  const fill = async (n: number) => {
    while (pending.length < n && !done) {
      const next = await iterator.next();
      if (next.done) done = true;
      else pending = pending.length ? Buffer.concat([pending, next.value]) : next.value;
    }
  };
  return {
    async read(n) {
      await fill(n);
      const out = pending.subarray(0, n);
      pending = pending.subarray(out.length);
      return out;
    },
    async skip(n) {
      skipped += n;
      if (skipped > MAX_STREAM_SKIP) throw new Error("no artifact header near the start");
      while (n > 0) {
        await fill(Math.min(n, 1 << 20));
        if (pending.length === 0) return;
        const take = Math.min(n, pending.length);
        pending = pending.subarray(take);
        n -= take;
      }
    },
    async close() {
      stream.destroy();
    },
  };
}

function bufferSource(data: Buffer): ByteSource {
  let position = 0;
  return {
    async read(n) {
      const out = data.subarray(position, position + n);
      position += out.length;
      return out;
    },
    async skip(n) {
      position += n;
    },
    async close() {},
  };
}

const isGzip = (head: Buffer) => head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;

/** Parses a ustar/GNU header block; undefined when it is not a valid tar header. */
function parseHeader(block: Buffer): { name: string; size: number; type: string } | undefined {
  if (block.length < BLOCK) return undefined;
  const stored = parseInt(block.subarray(148, 156).toString("latin1").replace(/\0.*$/s, "").trim(), 8);
  if (!Number.isFinite(stored)) return undefined;
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : block[i];
  if (sum !== stored) return undefined;
  const field = (start: number, end: number) => block.subarray(start, end).toString("utf8").replace(/\0.*$/s, "");
  let size: number;
  if (block[124] & 0x80) {
    size = 0; // base-256 (GNU) for huge members
    for (let i = 125; i < 136; i++) size = size * 256 + block[i];
  } else {
    size = parseInt(field(124, 136).trim() || "0", 8);
  }
  const prefix = block.subarray(257, 262).toString("latin1") === "ustar" ? field(345, 500) : "";
  const name = prefix ? `${prefix}/${field(0, 100)}` : field(0, 100);
  return { name: name.replace(/^\.\//, ""), size, type: String.fromCharCode(block[156] || 0x30) };
}

/** Reads the member `wanted` of a tar from `source` (only the first few members are looked at). */
async function findMember(source: ByteSource, wanted: string): Promise<Buffer | undefined> {
  let longName: string | undefined;
  for (let members = 0; members < MAX_MEMBERS; members++) {
    const header = parseHeader(await source.read(BLOCK));
    if (!header) return undefined;
    const padded = Math.ceil(header.size / BLOCK) * BLOCK;
    if (header.type === "L" && header.size <= 4096) {
      longName = (await source.read(padded)).subarray(0, header.size).toString("utf8").replace(/\0.*$/s, "");
      members--;
      continue;
    }
    const name = longName ?? header.name;
    longName = undefined;
    if (name === wanted && (header.type === "0" || header.type === "\0")) {
      if (header.size > MAX_HEADER_BYTES) return undefined;
      const data = await source.read(padded);
      return data.length >= header.size ? data.subarray(0, header.size) : undefined;
    }
    await source.skip(padded);
  }
  return undefined;
}

/**
 * Payload types from an in-memory `header-info`; [NONSTANDARD] when anything is missing or
 * malformed, and when the payload list is empty (an artifact of no known type).
 */
function payloadTypesFromHeaderInfo(text: Buffer): string[] {
  let info: unknown;
  try {
    info = JSON.parse(text.toString("utf8"));
  } catch {
    return [NONSTANDARD];
  }
  const payloads = (info as { payloads?: unknown })?.payloads;
  if (!Array.isArray(payloads) || payloads.length === 0) return [NONSTANDARD];
  const types: string[] = [];
  for (const payload of payloads) {
    const type = (payload as { type?: unknown })?.type;
    if (typeof type !== "string") return [NONSTANDARD];
    types.push(type);
  }
  return [...new Set(types)];
}

/**
 * The payload types of the artifact in file `path`. Plain and gzip-compressed tars are read;
 * other compressions, and everything that is not an artifact, are `nonstandard`.
 */
export async function artifactPayloadTypes(path: string): Promise<string[]> {
  const fh = await open(path, "r");
  let source: ByteSource;
  try {
    const head = Buffer.alloc(2);
    await fh.read(head, 0, 2, 0);
    if (isGzip(head)) {
      await fh.close();
      source = streamSource(createReadStream(path).pipe(createGunzip()));
    } else {
      source = fileSource(fh);
    }
  } catch (error) {
    await fh.close().catch(() => {});
    throw error;
  }
  try {
    let header = await findMember(source, "header.tar");
    if (!header) return [NONSTANDARD];
    if (isGzip(header)) header = gunzipSync(header, { maxOutputLength: MAX_HEADER_BYTES });
    const info = await findMember(bufferSource(header), "header-info");
    return info ? payloadTypesFromHeaderInfo(info) : [NONSTANDARD];
  } catch {
    return [NONSTANDARD]; // truncated or corrupt compression: not an artifact we can read
  } finally {
    await source.close().catch(() => {});
  }
}

/**
 * The form's fields with what a Mender artifact's header says filling the version and device
 * type the form left out (`artifact_name`, the first of its device types); the form wins. A file
 * that is not a readable artifact leaves the fields as they are.
 */
export async function fieldsWithArtifactHeader(path: string, fields: ReadonlyMap<string, string>, keys: { version: string; devtype: string }): Promise<ReadonlyMap<string, string>> {
  const missing = (key: string) => (fields.get(key) ?? "").trim() === "";
  if (!missing(keys.version) && !missing(keys.devtype)) return fields;
  let info: Awaited<ReturnType<typeof readArtifact>>;
  try {
    info = await readArtifact(createReadStream(path));
  } catch {
    return fields;
  }
  const filled = new Map(fields);
  if (missing(keys.version) && info.artifact_name) filled.set(keys.version, info.artifact_name);
  if (missing(keys.devtype) && info.device_types[0]) filled.set(keys.devtype, info.device_types[0]);
  return filled;
}
