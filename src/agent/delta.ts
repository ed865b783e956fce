/*
 * A delta the gateway offers beside a package (docs/update-server.md, "Deltas"): downloaded, applied
 * with xdelta3 to the configured base (delta_base: a file, or a command that prints its path, e.g.
 * the inactive partition's device) into a temporary file while its SHA-256 (and, with verify_keys,
 * the artifact's signature) is checked; only a result that matches the target's SHA-256 becomes the
 * download. Any failure is the caller's to report before it falls back to the full package.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createWriteStream, existsSync, unlinkSync } from "node:fs";
import { rename } from "node:fs/promises";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { ArtifactError, type ArtifactCheck } from "../artifact/mender/reader.ts";
import type { HttpClient } from "../update/client/http.ts";
import { runCommand } from "./commands.ts";
import { download } from "./updater.ts";

export interface OfferedDelta {
  uri: string;
  sha256: string;
  size?: number;
}

/** The base a delta applies to: the file delta_base names, or the last line its command prints. */
async function basePath(base: string | string[], cwd: string, signal: AbortSignal): Promise<string> {
  if (typeof base === "string") return base;
  const result = await runCommand(base, { cwd, timeout: 60, signal });
  const path = result.output.toString().trim().split("\n").pop()?.trim() ?? "";
  if (result.code !== 0 || !path) throw new Error(`delta_base command exited with ${result.code}${path ? "" : " and printed no path"}`);
  return path;
}

/** Applies `delta` to the base; resolves with the path of the target file (named by its SHA-256 in `dir`). */
export async function applyDelta(options: { delta: OfferedDelta; sha256: string; base: string | string[]; dir: string; cwd: string; http: HttpClient; signal: AbortSignal; check?: () => ArtifactCheck }): Promise<string> {
  const sha = options.sha256.toLowerCase();
  const base = await basePath(options.base, options.cwd, options.signal);
  if (!existsSync(base)) throw new Error(`delta base ${base} does not exist`);
  const deltaFile = await download({ url: options.delta.uri, sha256: options.delta.sha256, dir: options.dir, http: options.http, signal: options.signal });
  const out = join(options.dir, `${sha}.from-delta`);
  const hash = createHash("sha256");
  const check = options.check?.();
  try {
    const child = spawn("xdelta3", ["-d", "-c", "-q", "-s", base, deltaFile], { stdio: ["ignore", "pipe", "pipe"], signal: options.signal });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-1000)));
    const exited = new Promise<number>((resolve, reject) => {
      child.once("error", (error) => reject((error as NodeJS.ErrnoException).code === "ENOENT" ? new Error("xdelta3 is not installed on the device") : error));
      child.once("close", (code) => resolve(code ?? -1));
    });
    exited.catch(() => undefined);
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        hash.update(chunk);
        if (!check) return done(null, chunk);
        check.write(chunk).then(() => done(null, chunk), done);
      },
    });
    await Promise.all([pipeline(child.stdout, meter, createWriteStream(out, { mode: 0o600 })), exited]);
    const code = await exited;
    if (code !== 0) throw new Error(`xdelta3 exited with ${code}: ${stderr.trim() || "(no output)"}`);
    if (hash.digest("hex") !== sha) throw new Error("the delta applied to the base does not give the package's sha256 (the base is not the delta's)");
    if (check) {
      try {
        await check.end();
      } catch (error) {
        if (error instanceof ArtifactError) throw new Error(`signature: ${error.message}`);
        throw error;
      }
    }
    const final = join(options.dir, sha);
    await rename(out, final);
    return final;
  } finally {
    for (const file of [out, deltaFile]) if (existsSync(file)) unlinkSync(file);
  }
}
