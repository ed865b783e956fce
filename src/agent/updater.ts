/*
 * Downloads an update with `Range` resume and checks its SHA-256. A partial download is kept as
 * `<sha256>.part` in the agent's download dir; the next attempt asks for the rest. With a check
 * (a signed artifact's), every byte passes it on its way to the file, the resumed part read back.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, existsSync, statSync, unlinkSync } from "node:fs";
import { rename } from "node:fs/promises";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { ArtifactError, type ArtifactCheck } from "../artifact/mender/reader.ts";
import { httpRequest, type HttpClient } from "../update/client/http.ts";

export interface DownloadOptions {
  url: string;
  sha256: string;
  dir: string;
  /** Called with 0..100 as bytes arrive. */
  onProgress?: (percent: number) => void;
  signal?: AbortSignal;
  http?: HttpClient;
  /** A new check of the artifact's content (signature, payload checksums); its refusal fails the download for good. */
  check?: () => ArtifactCheck;
}

export class ChecksumError extends Error {}

/** The downloaded file is whole and as offered, but its content is refused (`signature: ...`); it is deleted. */
export class SignatureError extends Error {}

async function hashFile(path: string, check: ArtifactCheck | undefined, end?: number): Promise<ReturnType<typeof createHash>> {
  const hash = createHash("sha256");
  if (!existsSync(path)) return hash;
  for await (const chunk of createReadStream(path, end === undefined ? {} : { end: end - 1 })) {
    hash.update(chunk as Buffer);
    await check?.write(chunk as Buffer);
  }
  return hash;
}

/** The check's verdict on a whole file: the file goes when it is refused. */
async function judge(check: ArtifactCheck | undefined, file: string): Promise<void> {
  if (!check) return;
  try {
    await check.end();
  } catch (error) {
    unlinkSync(file);
    if (error instanceof ArtifactError) throw new SignatureError(`signature: ${error.message}`);
    throw error;
  }
}

/** Downloads (or finishes downloading) the file; returns the verified file's path. */
export async function download(options: DownloadOptions): Promise<string> {
  const sha = options.sha256.toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(sha)) throw new Error("update answer has no valid sha256");
  const final = join(options.dir, sha);
  if (existsSync(final)) {
    if (options.check) {
      const check = options.check();
      await hashFile(final, check);
      await judge(check, final);
    }
    return final;
  }
  const partial = `${final}.part`;
  let offset = existsSync(partial) ? statSync(partial).size : 0;
  const headers: Record<string, string> = offset > 0 ? { range: `bytes=${offset}-` } : {};
  const response = await (options.http ?? httpRequest)(options.url, { headers, signal: options.signal });
  if (response.status === 416) {
    // Already complete (or the object changed): start over.
    response.discard();
    unlinkSync(partial);
    throw new Error("download range not satisfiable; restarting");
  }
  if (response.status !== 200 && response.status !== 206) {
    response.discard();
    throw new Error(`download answered ${response.status}`);
  }
  if (response.status === 200) offset = 0; // the server sent everything: start over
  const length = Number(response.headers["content-length"] ?? NaN);
  const total = offset + (Number.isFinite(length) ? length : NaN);
  const check = options.check?.();
  const hash = offset > 0 ? await hashFile(partial, check, offset) : createHash("sha256");
  let received = offset;
  let reported = -1;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      received += chunk.length;
      const percent = Number.isFinite(total) && total > 0 ? Math.floor((received / total) * 100) : 0;
      if (percent !== reported && percent < 100) {
        reported = percent;
        options.onProgress?.(percent);
      }
      if (!check) return done(null, chunk);
      check.write(chunk).then(() => done(null, chunk), done);
    },
  });
  await pipeline(response.body, meter, createWriteStream(partial, { flags: offset > 0 ? "a" : "w" }));
  if (Number.isFinite(total) && received !== total) throw new Error(`download ended after ${received} of ${total} bytes`);
  if (hash.digest("hex") !== sha) {
    unlinkSync(partial);
    throw new ChecksumError("downloaded file does not match its sha256; discarded");
  }
  await judge(check, partial);
  await rename(partial, final);
  return final;
}
