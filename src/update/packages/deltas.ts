/*
 * Deltas made by the gateway (docs/update-server.md, "Deltas"): xdelta3 (VCDIFF) of a target
 * package's file against a base package's, stored as a package of the target's version that
 * `requires` the base version and records the target's SHA-256. Work is bounded: one delta at a
 * time (the rest wait in order), inputs up to update_server.delta_max_bytes, in the background with
 * its progress (the target's bytes read) visible to the console. An update check that offers the
 * target to a device on the base version names the delta beside it (updatecheck/check.ts).
 */
import { spawn } from "node:child_process";
import { createReadStream, existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { Transform } from "node:stream";
import type { Actor } from "../../audit/audit.ts";
import type { Identity } from "../../app/context.ts";
import type { Tx } from "../../db/store.ts";
import type { PackageStorage } from "../../storage/packages.ts";
import { LabgateError } from "../../util/errors.ts";
import { dateOf } from "../../util/time.ts";
import { createPackage, getPackage, packageKeys, type PackageContext, type PackageKeys, type PackageRow } from "./packages.ts";
import { allowed, authorize, grantCreator } from "../permissions/permissions.ts";

export interface DeltaJob {
  id: number;
  base: number;
  target: number;
  state: "queued" | "running" | "done" | "failed";
  /** 0..100: of the target's bytes read. */
  progress: number;
  /** The delta package, once done. */
  package?: number;
  error?: string;
}

/** Jobs kept for the console (the newest). */
const KEEP = 50;

const onPath = (program: string) => (process.env.PATH ?? "").split(delimiter).some((dir) => dir && existsSync(join(dir, program)));

export class DeltaMaker {
  private readonly jobs: DeltaJob[] = [];
  private nextId = 1;
  private running: Promise<void> | undefined;
  private readonly waiting: Array<{ job: DeltaJob; actor: Actor; user: string | null; onCreated?: (tx: Tx, id: number) => Promise<void> }> = [];
  private readonly ctx: PackageContext;
  private readonly storage: PackageStorage;
  private readonly onCreated: (job: DeltaJob, row: PackageRow) => void;

  constructor(ctx: PackageContext, storage: PackageStorage, onCreated: (job: DeltaJob, row: PackageRow) => void = () => undefined) {
    this.ctx = ctx;
    this.storage = storage;
    this.onCreated = onCreated;
  }

  /** The jobs of packages the caller may read (the target's and the base's). */
  async list(identity: Identity): Promise<DeltaJob[]> {
    const readable = (id: number) => allowed(this.ctx.store.query, identity, "package", id, "read");
    const shown: DeltaJob[] = [];
    for (const job of [...this.jobs]) if ((await readable(job.target)) && (await readable(job.base))) shown.push({ ...job });
    return shown;
  }

  /** Settles when no job is queued or running (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  /** Queues a delta of `targetId` from `baseId`; throws LabgateError for a pair that cannot make one. */
  /**
   * The caller asks for a delta of package `targetId` from `baseId`: it must read both, and is
   * granted the delta's package as its creator.
   */
  async request(identity: Identity, targetId: number, baseId: number, actor: Actor): Promise<DeltaJob> {
    if (identity.kind !== "mgmt") throw new LabgateError("unauthenticated", "a management token is required");
    await authorize(this.ctx.store.query, identity, "package", targetId, "read");
    await authorize(this.ctx.store.query, identity, "package", baseId, "read");
    const user = identity.user;
    const onCreated = (tx: Tx, id: number) => grantCreator(tx, identity, "package", id, dateOf(this.ctx.clock));
    if (!onPath("xdelta3")) throw new LabgateError("unavailable", "xdelta3 is not installed on the gateway (Debian: apt-get install xdelta3)");
    const target = await getPackage(this.ctx.store.query, targetId);
    const base = await getPackage(this.ctx.store.query, baseId);
    if (!target) throw new LabgateError("not_found", "specified package does not exist");
    if (!base) throw new LabgateError("invalid", `field "from": package ${baseId} does not exist`);
    const problem = deltaProblem(target, base, this.ctx.config.update_server.delta_max_bytes);
    if (problem) throw new LabgateError("invalid", problem);
    const job: DeltaJob = { id: this.nextId++, base: baseId, target: targetId, state: "queued", progress: 0 };
    this.jobs.push(job);
    if (this.jobs.length > KEEP) this.jobs.splice(0, this.jobs.length - KEEP);
    this.waiting.push({ job, actor, user, onCreated });
    this.running ??= this.drain().finally(() => (this.running = undefined));
    return { ...job };
  }

  private async drain(): Promise<void> {
    for (let next = this.waiting.shift(); next; next = this.waiting.shift()) {
      const { job } = next;
      job.state = "running";
      try {
        const row = await this.make(next);
        Object.assign(job, { state: "done", progress: 100, package: row.id });
        this.onCreated(job, row);
      } catch (error) {
        Object.assign(job, { state: "failed", error: (error as Error).message });
        this.ctx.log.warn(`delta ${job.base} -> ${job.target}: ${(error as Error).message}`);
      }
    }
  }

  private async make({ job, actor, user, onCreated }: DeltaMaker["waiting"][number]): Promise<PackageRow> {
    const keys = packageKeys(this.ctx.config.prefix);
    const target = await getPackage(this.ctx.store.query, job.target);
    const base = await getPackage(this.ctx.store.query, job.base);
    if (!target || !base) throw new Error("a package was deleted before its delta was made");
    const targetFile = await this.storage.localFile(target.storage_name);
    const baseFile = targetFile && (await this.storage.localFile(base.storage_name).catch(async (error: unknown) => {
      await targetFile.release();
      throw error;
    }));
    if (!targetFile || !baseFile) {
      await targetFile?.release();
      throw new Error("a package's file is missing from storage");
    }
    try {
      return await this.makeFrom(job, keys, target, base, targetFile.path, baseFile.path, { actor, user, onCreated });
    } finally {
      await targetFile.release();
      await baseFile.release();
    }
  }

  private async makeFrom(job: DeltaJob, keys: PackageKeys, target: PackageRow, base: PackageRow, targetPath: string, basePath: string, by: Pick<DeltaMaker["waiting"][number], "actor" | "user" | "onCreated">): Promise<PackageRow> {
    const { actor, user, onCreated } = by;
    // xdelta3 reads the base by seeking and the target as a stream: the target's bytes read are the progress.
    const child = spawn("xdelta3", ["-e", "-c", "-q", "-s", basePath], { stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
    const exited = new Promise<number>((resolve) => child.once("close", (code) => resolve(code ?? -1)));
    let read = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        read += chunk.length;
        job.progress = Math.min(99, Math.floor((read / Math.max(1, target.size)) * 100));
        done(null, chunk);
      },
    });
    createReadStream(targetPath).pipe(meter).pipe(child.stdin);
    child.stdin.on("error", () => undefined); // xdelta3 failing early: its exit status says why
    const staged = await this.storage.stage(child.stdout);
    const code = await exited;
    if (code !== 0) {
      await this.storage.discard(staged);
      throw new Error(`xdelta3 exited with ${code}: ${stderr.trim()}`);
    }
    const targetMeta = JSON.parse(target.metadata) as Record<string, unknown>;
    const fields = new Map<string, string>([
      [keys.version, target.version],
      [keys.devtype, target.devtype],
      [`requires:${keys.version}`, base.version],
      [keys.deltaTarget, String(target.id)],
      [keys.deltaBase, String(base.id)],
      [keys.deltaTargetSha256, target.sha256],
      [keys.deltaTargetSize, String(target.size)],
    ]);
    // The target's signature verdict stays the target's: the file a device installs is the target's.
    for (const key of [keys.signatureStatus, keys.signatureKey, keys.signatureReason]) if (typeof targetMeta[key] === "string") fields.set(key, targetMeta[key] as string);
    return createPackage(this.ctx, this.storage, { staged, fields, dir: this.storage.normalizeDir(target.storage_dir), user, actor, onCreated });
  }
}

/** Why a delta of `target` from `base` is not made, or undefined. */
export function deltaProblem(target: PackageRow, base: PackageRow, maxBytes: number): string | undefined {
  if (target.id === base.id) return `field "from": a package is not made a delta of itself`;
  if (target.delta_target !== null || base.delta_target !== null) return "a delta is made of two full packages, not of a delta";
  if (target.devtype !== base.devtype) return `field "from": package ${base.id} is for device type ${base.devtype}, not ${target.devtype}`;
  if (target.version === base.version) return `field "from": package ${base.id} has the same version (${base.version})`;
  for (const row of [target, base]) if (row.size > maxBytes) return `package ${row.id} is larger than update_server.delta_max_bytes (${maxBytes})`;
  return undefined;
}
