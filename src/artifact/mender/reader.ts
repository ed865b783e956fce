/*
 * A streaming reader of Mender artifacts (format 2 and 3, what `mender-artifact write` makes): a
 * tar of `version`, `manifest` (the SHA-256 of every other member and payload file),
 * `manifest.sig` (when signed), `header.tar[.gz]` (`header-info`: name, device types, payload
 * types) and `data/NNNN.tar[.gz]` (the payload files). The manifest comes first, so every later
 * byte is checked against it as it passes; only the small members are held in memory, however
 * large the payloads.
 */
import { createHash } from "node:crypto";
import { PassThrough, Transform, type Readable, type Writable } from "node:stream";
import type * as Zlib from "node:zlib";
import tar from "tar-stream";

/** zlib once an artifact is read: an agent that verifies nothing never loads it. */
const zlib = (): typeof Zlib => process.getBuiltinModule("node:zlib");
import { verifiesWith, type VerifyKey } from "./keys.ts";

/** Why an artifact is refused: the first word of every ArtifactError's message. */
export type ArtifactProblem = "unsigned" | "no key matches" | "payload checksum" | "manifest";

/** An artifact that is refused; `message` is `<problem>: <what exactly>`. */
export class ArtifactError extends Error {
  readonly problem: ArtifactProblem;
  constructor(problem: ArtifactProblem, detail: string) {
    super(`${problem}: ${detail}`);
    this.problem = problem;
  }
}

export interface ArtifactInfo {
  format_version: number;
  /** `artifact_provides.artifact_name` (format 3) or `artifact_name` (format 2). */
  artifact_name: string;
  /** The device types it is for (`artifact_depends.device_type`). */
  device_types: string[];
  payload_types: string[];
  /** `artifact_provides` as written (format 3), strings only. */
  provides: Record<string, string>;
  /** Whether it carries `manifest.sig`. */
  signed: boolean;
  /** The key that verified the signature (only when keys were given). */
  signed_by?: VerifyKey;
}

export interface ReadOptions {
  /** Keys given: the manifest must be signed by one of them. None: the signature is not checked. */
  keys?: readonly VerifyKey[];
}

const MAX_SMALL = 64 * 1024; // version, manifest.sig
const MAX_MANIFEST = 4 * 1024 * 1024;
const MAX_HEADER = 16 * 1024 * 1024; // header.tar(.gz), compressed and not
const MANIFEST_LINE = /^([0-9a-f]{64}) {2}(\S(?:.*\S)?)$/;
const DATA = /^data\/(\d{4})\.tar(\.gz)?$/;
const HEADER = /^header\.tar(\.gz)?$/;

const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

async function readBounded(stream: Readable, limit: number, name: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new ArtifactError("manifest", `${name} is larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function parseManifest(text: string): Map<string, string> {
  const entries = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const match = MANIFEST_LINE.exec(line);
    if (!match) throw new ArtifactError("manifest", `manifest line ${JSON.stringify(line.slice(0, 120))} is not "<sha256>  <name>"`);
    if (entries.has(match[2])) throw new ArtifactError("manifest", `manifest lists ${match[2]} twice`);
    entries.set(match[2], match[1]);
  }
  if (entries.size === 0) throw new ArtifactError("manifest", "manifest is empty");
  return entries;
}

/** Checks a member read whole against its manifest line. */
function checkListed(manifest: Map<string, string>, name: string, digest: string): void {
  const listed = manifest.get(name);
  if (!listed) throw new ArtifactError("manifest", `${name} is not in the manifest`);
  if (listed !== digest) throw new ArtifactError("manifest", `${name} does not match its manifest checksum`);
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : typeof value === "string" ? [value] : []);

/** What `header-info` says, from the (verified) header tar. */
async function readHeaderInfo(header: Buffer, name: string): Promise<Pick<ArtifactInfo, "artifact_name" | "device_types" | "payload_types" | "provides">> {
  let tarBytes: Buffer;
  try {
    tarBytes = name.endsWith(".gz") ? zlib().gunzipSync(header, { maxOutputLength: MAX_HEADER }) : header;
  } catch (error) {
    throw new ArtifactError("manifest", `${name} is corrupt (${(error as Error).message})`);
  }
  const extract = tar.extract();
  const done = readBounded(extractMember(extract, "header-info"), MAX_SMALL, "header-info");
  extract.end(tarBytes);
  let info: Record<string, unknown>;
  try {
    info = JSON.parse((await done).toString("utf8")) as Record<string, unknown>;
  } catch (error) {
    if (error instanceof ArtifactError) throw error;
    throw new ArtifactError("manifest", `${name} has no readable header-info (${(error as Error).message})`);
  }
  const provides = (info.artifact_provides && typeof info.artifact_provides === "object" ? info.artifact_provides : {}) as Record<string, unknown>;
  const depends = (info.artifact_depends && typeof info.artifact_depends === "object" ? info.artifact_depends : {}) as Record<string, unknown>;
  const payloads = Array.isArray(info.payloads) ? info.payloads : [];
  return {
    artifact_name: strings(provides.artifact_name ?? info.artifact_name)[0] ?? "",
    device_types: strings(depends.device_type ?? info.device_types_compatible),
    payload_types: [...new Set(payloads.map((p) => (p as { type?: unknown })?.type).filter((t): t is string => typeof t === "string"))],
    provides: Object.fromEntries(Object.entries(provides).filter((e): e is [string, string] => typeof e[1] === "string")),
  };
}

/** A stream of the member `wanted` of the tar written to `extract` (empty when it has none). */
function extractMember(extract: tar.Extract, wanted: string): Readable {
  const out = new PassThrough();
  (async () => {
    for await (const entry of extract) {
      if (entry.header.name.replace(/^\.\//, "") === wanted) {
        for await (const chunk of entry as AsyncIterable<Buffer>) if (!out.write(chunk)) await new Promise((r) => out.once("drain", r));
      } else entry.resume();
    }
    out.end();
  })().catch((error: unknown) => out.destroy(error as Error));
  return out;
}

/** Checks every file of a payload tar against the manifest as it streams. */
async function checkPayload(entry: Readable, name: string, manifest: Map<string, string>, seen: Set<string>): Promise<void> {
  const prefix = name.replace(/\.tar(\.gz)?$/, "");
  const inner = tar.extract();
  const corrupt = (error: Error) => inner.destroy(new ArtifactError("payload checksum", `${name} is corrupt (${error.message})`));
  const source: Readable = name.endsWith(".gz") ? entry.pipe(zlib().createGunzip()).on("error", corrupt) : entry;
  entry.on("error", (error) => inner.destroy(error));
  source.pipe(inner as unknown as Writable);
  try {
    for await (const file of inner) {
      const path = `${prefix}/${file.header.name.replace(/^\.\//, "")}`;
      const hash = createHash("sha256");
      for await (const chunk of file as AsyncIterable<Buffer>) hash.update(chunk);
      if (file.header.type !== "file") continue;
      const listed = manifest.get(path);
      if (!listed) throw new ArtifactError("payload checksum", `${path} is not in the manifest`);
      if (hash.digest("hex") !== listed) throw new ArtifactError("payload checksum", `${path} does not match its manifest checksum`);
      seen.add(path);
    }
  } catch (error) {
    if (error instanceof ArtifactError) throw error;
    throw new ArtifactError("payload checksum", `${name} is corrupt (${(error as Error).message})`);
  }
  // What follows the inner tar's end (gzip's tail, padding) is read so the next member can come.
  for await (const _ of entry) void _;
}

/**
 * Reads a whole artifact from `source`, checking every member and payload file against the
 * manifest (and, with `keys`, the manifest's signature). Throws ArtifactError for an artifact that
 * fails a check; resolves with what its header says once the last byte passed.
 */
export async function readArtifact(source: Readable, options: ReadOptions = {}): Promise<ArtifactInfo> {
  const keys = options.keys ?? [];
  const extract = tar.extract();
  source.on("error", (error) => extract.destroy(error));
  source.pipe(extract as unknown as Writable);
  let format = 0;
  let versionDigest = "";
  let manifest: Map<string, string> | undefined;
  let manifestBytes: Buffer | undefined;
  let signed = false;
  let signedBy: VerifyKey | undefined;
  let header: Awaited<ReturnType<typeof readHeaderInfo>> | undefined;
  const seen = new Set<string>();
  let members = 0;
  /** After the manifest (and its signature, if any): from here on nothing is read that is not signed for. */
  const signatureSettled = () => {
    if (keys.length > 0 && !signed) throw new ArtifactError("unsigned", "the artifact has no manifest.sig");
  };
  try {
    for await (const entry of extract) {
      const name = entry.header.name.replace(/^\.\//, "");
      members++;
      if (members === 1 && name !== "version") throw new ArtifactError("unsigned", `not a Mender artifact (its first member is ${JSON.stringify(name)}, not version)`);
      if (entry.header.type !== "file") throw new ArtifactError("manifest", `member ${name} is a ${entry.header.type}, not a file`);
      if (name === "version") {
        if (members !== 1) throw new ArtifactError("manifest", "version appears twice");
        const bytes = await readBounded(entry, MAX_SMALL, name);
        let version: { format?: unknown; version?: unknown };
        try {
          version = JSON.parse(bytes.toString("utf8")) as typeof version;
        } catch {
          throw new ArtifactError("unsigned", "not a Mender artifact (its version member is not JSON)");
        }
        if (version.format !== "mender" || (version.version !== 2 && version.version !== 3)) {
          throw new ArtifactError("manifest", `unsupported artifact format ${JSON.stringify(version.format)} version ${JSON.stringify(version.version)} (expected mender 2 or 3)`);
        }
        format = version.version;
        versionDigest = sha256(bytes);
      } else if (name === "manifest") {
        if (manifest) throw new ArtifactError("manifest", "manifest appears twice");
        manifestBytes = await readBounded(entry, MAX_MANIFEST, name);
        manifest = parseManifest(manifestBytes.toString("utf8"));
        checkListed(manifest, "version", versionDigest);
      } else if (name === "manifest.sig") {
        if (!manifestBytes || header || signed) throw new ArtifactError("manifest", "manifest.sig is not right after the manifest");
        const signature = Buffer.from((await readBounded(entry, MAX_SMALL, name)).toString("latin1").trim(), "base64");
        signed = true;
        if (keys.length > 0) {
          signedBy = keys.find((key) => verifiesWith(key.key, manifestBytes!, signature));
          if (!signedBy) throw new ArtifactError("no key matches", `manifest.sig verifies with none of the ${keys.length} key(s)`);
        }
      } else if (name === "manifest-augment" || name.startsWith("header-augment")) {
        throw new ArtifactError("manifest", `${name}: augmented artifacts are not supported (their augment is not signed)`);
      } else if (HEADER.test(name)) {
        if (!manifest) throw new ArtifactError("manifest", `${name} comes before the manifest`);
        signatureSettled();
        if (header) throw new ArtifactError("manifest", "the artifact has two headers");
        const bytes = await readBounded(entry, MAX_HEADER, name);
        checkListed(manifest, name, sha256(bytes));
        header = await readHeaderInfo(bytes, name);
      } else if (DATA.test(name)) {
        if (!manifest || !header) throw new ArtifactError("manifest", `${name} comes before the header`);
        await checkPayload(entry, name, manifest, seen);
      } else if (/^(header|data\/\d{4})\.tar\./.test(name)) {
        throw new ArtifactError("manifest", `${name}: only gzip and uncompressed artifacts are read (mender-artifact write -c gzip or none)`);
      } else {
        throw new ArtifactError("manifest", `unexpected member ${JSON.stringify(name)}`);
      }
    }
  } catch (error) {
    if (error instanceof ArtifactError) throw error;
    const message = (error as Error).message;
    if (members === 0) throw new ArtifactError("unsigned", `not a Mender artifact (${message})`);
    throw new ArtifactError("manifest", `the artifact is corrupt (${message})`);
  } finally {
    source.unpipe(extract as unknown as Writable);
    extract.destroy();
  }
  if (members === 0) throw new ArtifactError("unsigned", "not a Mender artifact (empty)");
  if (!manifest) throw new ArtifactError("manifest", "the artifact has no manifest");
  signatureSettled();
  if (!header) throw new ArtifactError("manifest", "the artifact has no header");
  for (const name of manifest.keys()) {
    if (name.startsWith("data/") && !seen.has(name)) throw new ArtifactError("manifest", `${name} is in the manifest but not in the artifact`);
  }
  return { format_version: format, ...header, signed, ...(signedBy ? { signed_by: signedBy } : {}) };
}

/**
 * An artifact check fed chunk by chunk (a download, an upload) while the bytes go elsewhere too:
 * `write` waits while the reader is behind, so memory stays flat; once the reader has decided,
 * what follows is not looked at.
 */
export class ArtifactCheck {
  private readonly feed = new PassThrough();
  private settled = false;
  readonly result: Promise<ArtifactInfo>;

  constructor(options: ReadOptions = {}) {
    this.result = readArtifact(this.feed, options).finally(() => {
      this.settled = true;
      this.feed.resume(); // what is still buffered is dropped
    });
    this.result.catch(() => undefined); // awaited by end()
  }

  async write(chunk: Buffer): Promise<void> {
    if (this.settled || this.feed.write(chunk)) return;
    await Promise.race([new Promise((resolve) => this.feed.once("drain", resolve)), this.result.catch(() => undefined)]);
  }

  /** Every byte was written: the verdict. */
  end(): Promise<ArtifactInfo> {
    if (!this.settled) this.feed.end();
    return this.result;
  }

  /** A pass-through stream that feeds this check on its way. */
  tap(): Transform {
    return new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        this.write(chunk).then(() => done(null, chunk), done);
      },
    });
  }
}
