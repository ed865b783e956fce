/*
 * The S3 driver: an S3-compatible bucket through aws4fetch (Signature V4 over fetch, presigned
 * URLs). Uploads go in parts of PART_BYTES held one at a time, so memory stays flat whatever
 * the length; reads stream the store's answer through with its range. The build makes this a
 * part of its own (./parts.ts): a gateway on local storage never loads it. Its errors are made by
 * the constructors the main bundle passes in (`S3Errors`), so that the main bundle recognises them.
 */
import { unlink } from "node:fs/promises";
import { createReadStream } from "node:fs";
import { Readable } from "node:stream";
import { AwsClient } from "aws4fetch";
import type { Config } from "../config/config.ts";
import type { ObjectInfo, ObjectListing, ObjectRead, ObjectStore, ReadRequest } from "./objects.ts";

export type S3Settings = Config["storage"]["s3"];

/** The main bundle's errors: a refused start (exit 2) and a store that cannot be used now (503). */
export interface S3Errors {
  config(message: string): Error;
  unavailable(message: string): Error;
}

/** Bytes of one part of a multipart upload (S3's least is 5 MiB): what an upload holds in memory. */
const PART_BYTES = 8 * 1024 * 1024;
/** Attempts after a first failed request (a 5xx, 429 or a lost connection); bodies are buffers, so a retry resends them. */
const RETRIES = 2;
/** A request without a streamed answer that takes longer than this has failed. */
const REQUEST_TIMEOUT_MS = 30_000;

/** An S3 key in a URL path: each segment percent-encoded. */
const keyPath = (key: string) => key.split("/").map(encodeURIComponent).join("/");

const XML_ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };
const xmlText = (text: string) => text.replace(/&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-f]+);/gi, (_, e: string) => (e[0] === "#" ? String.fromCodePoint(Number(e[1] === "x" || e[1] === "X" ? `0${e.slice(1)}` : e.slice(1))) : XML_ENTITIES[e.toLowerCase()]!));
const xmlField = (xml: string, name: string) => {
  const match = new RegExp(`<${name}>([^<]*)</${name}>`).exec(xml);
  return match ? xmlText(match[1]!) : undefined;
};

export class S3Objects implements ObjectStore {
  readonly driver = "s3" as const;
  private readonly client: AwsClient;
  /** The bucket's URL: objects are `${bucketUrl}/${key}`. */
  private readonly bucketUrl: string;

  private readonly settings: S3Settings;
  private readonly errors: S3Errors;

  constructor(settings: S3Settings, errors: S3Errors) {
    this.settings = settings;
    this.errors = errors;
    this.client = new AwsClient({ accessKeyId: settings.access_key_id, secretAccessKey: settings.secret_access_key, service: "s3", region: settings.region, retries: RETRIES });
    const endpoint = new URL(settings.endpoint || `https://s3.${settings.region}.amazonaws.com`);
    const origin = endpoint.origin;
    const path = endpoint.pathname.replace(/\/+$/, "");
    this.bucketUrl = settings.path_style ? `${origin}${path}/${settings.bucket}` : `${endpoint.protocol}//${settings.bucket}.${endpoint.host}${path}`;
  }

  /** Where the store is, for the log (no credentials in it). */
  describe(): string {
    return this.bucketUrl;
  }

  /** Refuses a start whose store says the bucket or the credentials are wrong; a store that cannot be reached only warns (its requests answer 503 until it is back). */
  async check(warn: (message: string) => void): Promise<void> {
    let res: Response;
    try {
      res = await this.client.fetch(this.bucketRoot(), { method: "HEAD", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    } catch (error) {
      warn(`storage: the S3 store at ${this.bucketUrl} cannot be reached (${reason(error)}); package and test-run files answer 503 until it can`);
      return;
    }
    if (res.ok) return;
    if (res.status === 404) throw this.errors.config(`config key storage.s3.bucket: the store at ${this.settings.endpoint || "AWS"} has no bucket ${JSON.stringify(this.settings.bucket)}`);
    if (res.status === 403 || res.status === 400 || res.status === 401) throw this.errors.config(`config key storage.s3.access_key_id: the store refused labgate's credentials for bucket ${JSON.stringify(this.settings.bucket)} (HTTP ${res.status})`);
    warn(`storage: the S3 store at ${this.bucketUrl} answered HTTP ${res.status}; package and test-run files answer 503 until it works`);
  }

  async put(key: string, source: Readable): Promise<number> {
    let parts: Buffer[] = [];
    let held = 0;
    let total = 0;
    let upload: { id: string; etags: string[] } | undefined;
    try {
      for await (const chunk of source as AsyncIterable<Buffer>) {
        parts.push(chunk);
        held += chunk.length;
        total += chunk.length;
        while (held >= PART_BYTES) {
          const joined = Buffer.concat(parts, held);
          const part = joined.subarray(0, PART_BYTES);
          const rest = joined.subarray(PART_BYTES);
          upload ??= { id: await this.startMultipart(key), etags: [] };
          upload.etags.push(await this.uploadPart(key, upload.id, upload.etags.length + 1, part));
          parts = rest.length ? [Buffer.from(rest)] : [];
          held = rest.length;
        }
      }
      const last = Buffer.concat(parts, held);
      parts = [];
      if (!upload) {
        await this.expect(await this.send(this.url(key), { method: "PUT", body: last as Uint8Array<ArrayBuffer> }), [200], `store ${key}`);
        return total;
      }
      if (last.length > 0) upload.etags.push(await this.uploadPart(key, upload.id, upload.etags.length + 1, last));
      const body = `<CompleteMultipartUpload>${upload.etags.map((etag, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${etag}</ETag></Part>`).join("")}</CompleteMultipartUpload>`;
      const res = await this.send(this.url(key, `uploadId=${encodeURIComponent(upload.id)}`), { method: "POST", body });
      // A completion can fail inside a 200 answer (S3 says so in its body).
      const text = await this.expect(res, [200], `store ${key}`);
      if (/<Error>/.test(text)) throw this.unavailable(`store ${key}`, `${xmlField(text, "Code") ?? "error"}: ${xmlField(text, "Message") ?? ""}`);
      return total;
    } catch (error) {
      if (upload) await this.send(this.url(key, `uploadId=${encodeURIComponent(upload.id)}`), { method: "DELETE" }).then((r) => r.body?.cancel(), () => undefined);
      source.destroy();
      throw error;
    }
  }

  async putFile(key: string, path: string): Promise<void> {
    await this.put(key, createReadStream(path, { highWaterMark: 1024 * 1024 }));
    await unlink(path).catch(() => undefined);
  }

  async read(key: string, request: ReadRequest = {}): Promise<ObjectRead | undefined> {
    const headers: Record<string, string> = {};
    if (request.range) headers.range = await this.absoluteRange(key, request.range);
    if (request.ifNoneMatch) headers["if-none-match"] = request.ifNoneMatch;
    if (request.ifRange) headers["if-range"] = request.ifRange;
    const res = await this.send(this.url(key), { method: request.head ? "HEAD" : "GET", headers }, false);
    if (res.status === 404) {
      await res.body?.cancel();
      return undefined;
    }
    if (res.status !== 200 && res.status !== 206 && res.status !== 304 && res.status !== 416) {
      await this.expect(res, [200], `read ${key}`);
    }
    const contentRange = res.headers.get("content-range") ?? "";
    const ranged = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(contentRange);
    const unsatisfied = /^bytes \*\/(\d+)$/.exec(contentRange);
    // A 416 without `bytes */size` (some servers send none) has its error's length, not the object's.
    const size = ranged ? Number(ranged[3]) : unsatisfied ? Number(unsatisfied[1]) : res.status === 416 ? ((await this.stat(key))?.size ?? 0) : Number(res.headers.get("content-length") ?? 0);
    const read: ObjectRead = {
      status: res.status as ObjectRead["status"],
      size,
      etag: res.headers.get("etag") ?? "",
      modified: new Date(res.headers.get("last-modified") ?? 0),
    };
    if (ranged) read.range = { start: Number(ranged[1]), end: Number(ranged[2]) };
    if ((res.status === 200 || res.status === 206) && !request.head && res.body) read.body = Readable.fromWeb(res.body as import("node:stream/web").ReadableStream<Uint8Array>);
    else await res.body?.cancel();
    return read;
  }

  /** A suffix range (`bytes=-N`) as the absolute one it means: not every S3-compatible server reads the suffix form. */
  private async absoluteRange(key: string, range: string): Promise<string> {
    const suffix = /^\s*bytes\s*=\s*-\s*(\d+)\s*$/i.exec(range);
    if (!suffix) return range;
    const size = (await this.stat(key))?.size ?? 0;
    const wanted = Number(suffix[1]);
    return wanted === 0 || size === 0 ? range : `bytes=${Math.max(0, size - wanted)}-${size - 1}`;
  }

  async stat(key: string): Promise<ObjectInfo | undefined> {
    const read = await this.read(key, { head: true });
    return read && { size: read.size, modified: read.modified };
  }

  async delete(key: string): Promise<void> {
    const res = await this.send(this.url(key), { method: "DELETE" });
    await this.expect(res, [200, 204, 404], `delete ${key}`);
  }

  async list(prefix: string): Promise<ObjectListing[]> {
    const out: ObjectListing[] = [];
    let token: string | undefined;
    do {
      const query = `list-type=2&prefix=${encodeURIComponent(prefix)}${token ? `&continuation-token=${encodeURIComponent(token)}` : ""}`;
      const xml = await this.expect(await this.send(`${this.bucketRoot()}?${query}`, { method: "GET" }), [200], "list objects");
      for (const [, entry] of xml.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)) {
        const key = xmlField(entry!, "Key");
        if (key === undefined) continue;
        out.push({ key, size: Number(xmlField(entry!, "Size") ?? 0), modified: new Date(xmlField(entry!, "LastModified") ?? 0) });
      }
      token = xmlField(xml, "IsTruncated") === "true" ? xmlField(xml, "NextContinuationToken") : undefined;
    } while (token);
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async presign(key: string, ttlSeconds: number, filename?: string): Promise<string> {
    const disposition = filename ? `&response-content-disposition=${encodeURIComponent(`attachment; filename="${filename.replace(/["\\\r\n]/g, "_")}"`)}` : "";
    const signed = await this.client.sign(this.url(key, `X-Amz-Expires=${Math.min(ttlSeconds, 604_800)}${disposition}`), { method: "GET", aws: { signQuery: true } });
    return signed.url;
  }

  private unavailable(what: string, why: string): Error {
    return this.errors.unavailable(`the object store is unavailable: could not ${what}: ${why}`);
  }

  /** The bucket itself: `endpoint/bucket` in path style (some servers sign `/bucket/` differently), `https://bucket.host/` else. */
  private bucketRoot(): string {
    return this.settings.path_style ? this.bucketUrl : `${this.bucketUrl}/`;
  }

  private url(key: string, query?: string): string {
    return `${this.bucketUrl}/${keyPath(key)}${query ? `?${query}` : ""}`;
  }

  private async startMultipart(key: string): Promise<string> {
    const xml = await this.expect(await this.send(this.url(key, "uploads="), { method: "POST" }), [200], `store ${key}`);
    const id = xmlField(xml, "UploadId");
    if (!id) throw this.unavailable(`store ${key}`, "the store started no multipart upload");
    return id;
  }

  private async uploadPart(key: string, uploadId: string, number: number, body: Buffer): Promise<string> {
    const res = await this.send(this.url(key, `partNumber=${number}&uploadId=${encodeURIComponent(uploadId)}`), { method: "PUT", body: body as Uint8Array<ArrayBuffer> });
    const etag = res.headers.get("etag");
    await this.expect(res, [200], `store ${key}`);
    if (!etag) throw this.unavailable(`store ${key}`, "the store gave a part no ETag");
    return etag;
  }

  /** One signed request; a store that cannot be reached is a 503 of labgate's. */
  private async send(url: string, init: RequestInit, timed = true): Promise<Response> {
    try {
      return await this.client.fetch(url, { ...init, ...(timed ? { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) } : {}) });
    } catch (error) {
      throw this.unavailable("reach the store", reason(error));
    }
  }

  /** The answer's text when its status is one of `ok`, else the 503 that names what the store said. */
  private async expect(res: Response, ok: number[], what: string): Promise<string> {
    const text = await res.text().catch(() => "");
    if (ok.includes(res.status)) return text;
    throw this.unavailable(what, `HTTP ${res.status}${xmlField(text, "Code") ? ` ${xmlField(text, "Code")}` : ""}`);
  }
}

const reason = (error: unknown): string => {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message ?? String(error);
};


/** The S3 driver for `settings`, its bucket checked (./s3.ts `check`). */
export async function openS3Objects(settings: S3Settings, errors: S3Errors, warn: (message: string) => void): Promise<S3Objects> {
  const objects = new S3Objects(settings, errors);
  await objects.check(warn);
  return objects;
}
