import type { Database, SqlParam, Tx } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import type { AppContext } from "../../app/context.ts";
import type { LocalStorage, StagedObject } from "../../storage/local.ts";
import { dateOf, isoTime, rfc822 } from "../../util/time.ts";
import type { Package, PackageMetadata, PackageUsage } from "./schema.ts";
import { groupNameOf } from "../groups/name.ts";
import { signatureMetadata, type SignatureMark } from "./signing.ts";

/** A package row as stored. */
export interface PackageRow {
  id: number;
  created: string;
  sha256: string;
  driver: string;
  metadata: string;
  storage_dir: string;
  storage_name: string;
  size: number;
  version: string;
  devtype: string;
  created_by: string | null;
}


/** Metadata key names under the configured product prefix (never a literal `svc`). */
export function packageKeys(prefix: string) {
  return {
    version: `${prefix}.software.version`,
    devtype: `${prefix}.hardware.devtype`,
    storageDirectory: `${prefix}.storage.directory`,
    /** Everything under this prefix belongs to the storage driver (reserved at upload). */
    reserved: `${prefix}.storage.`,
    localUuid: `${prefix}.storage.local.uuid`,
    localLength: `${prefix}.storage.local.length`,
    localDirectory: `${prefix}.storage.local.directory`,
    /** The gateway's verdict on an upload's signature (signing.ts): set by it alone, reserved at upload. */
    signatureReserved: `${prefix}.signature.`,
    signatureStatus: `${prefix}.signature.status`,
    signatureKey: `${prefix}.signature.key`,
    signatureReason: `${prefix}.signature.reason`,
    /** A delta made by the gateway (deltas.ts): set by it alone, reserved at upload. */
    deltaReserved: `${prefix}.delta.`,
    deltaTarget: `${prefix}.delta.target`,
    deltaBase: `${prefix}.delta.base`,
    deltaTargetSha256: `${prefix}.delta.target_sha256`,
    deltaTargetSize: `${prefix}.delta.target_size`,
  };
}
export type PackageKeys = ReturnType<typeof packageKeys>;

const COLUMNS = "id, created, sha256, driver, metadata, storage_dir, storage_name, size, version, devtype, created_by";

/**
 * Where a package is used: the groups (those `groups` lets through) that have it, and the
 * deployments to them of the package's version, newest first, at most 100.
 */
export function packageUsage(db: Database, row: PackageRow, prefix: string, groups: { sql: string; params: SqlParam[] } | undefined): PackageUsage {
  const visible = groups ? ` AND ${groups.sql}` : "";
  const found = db.all<{ id: number; metadata: string }>(
    `SELECT g.id, g.metadata FROM groups g JOIN group_packages gp ON gp.group_id = g.id WHERE gp.package_id = ?${visible} ORDER BY g.id`,
    [row.id, ...(groups?.params ?? [])],
  );
  const version = (JSON.parse(row.metadata) as Record<string, unknown>)[packageKeys(prefix).version];
  const deployments =
    found.length === 0 || typeof version !== "string"
      ? []
      : db.all<PackageUsage["deployments"][number]>(
          "SELECT id, group_id, version, status, created FROM deployments WHERE version = ? AND group_id IN (SELECT value FROM json_each(?)) ORDER BY id DESC LIMIT 100",
          [version, JSON.stringify(found.map((g) => g.id))],
        );
  return { groups: found.map((g) => ({ id: g.id, name: groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) ?? null })), deployments };
}

export function getPackage(db: Database | Tx, id: number): PackageRow | undefined {
  return db.get<PackageRow>(`SELECT ${COLUMNS} FROM packages WHERE id = ?`, [id]);
}

/** The packages of `version` a deployment to a group would offer: the group's, and those it assigns first (`extra`). */
export function packagesOfVersion(db: Database | Tx, groupId: number, version: string, extra: readonly number[] = []): PackageRow[] {
  return db.all<PackageRow>(
    `SELECT ${COLUMNS} FROM packages WHERE version = ? AND (id IN (SELECT package_id FROM group_packages WHERE group_id = ?) OR id IN (SELECT value FROM json_each(?))) ORDER BY id`,
    [version, groupId, JSON.stringify(extra)],
  );
}

/** The newest delta the gateway made of package `targetId` for devices on `baseVersion`, if any. */
export function deltaOf(db: Database | Tx, prefix: string, targetId: number, baseVersion: string): PackageRow | undefined {
  const keys = packageKeys(prefix);
  return db.get<PackageRow>(
    `SELECT ${COLUMNS} FROM packages WHERE json_extract(metadata, ?) = ? AND json_extract(metadata, ?) = ? ORDER BY id DESC LIMIT 1`,
    [`$."${keys.deltaTarget}"`, String(targetId), `$."requires:${keys.version}"`, baseVersion],
  );
}

/** The oldest full package (not a delta) of `version` for `devtype`: what a delta is made from. */
export function fullPackageOf(db: Database | Tx, prefix: string, version: string, devtype: string): PackageRow | undefined {
  return db.get<PackageRow>(`SELECT ${COLUMNS} FROM packages WHERE version = ? AND devtype = ? AND json_extract(metadata, ?) IS NULL ORDER BY id LIMIT 1`, [
    version,
    devtype,
    `$."${packageKeys(prefix).deltaTarget}"`,
  ]);
}

/** The packages `filter` lets through (a permission filter on the alias `pkg`), by id. */
export function listPackages(db: Database | Tx, filter?: { sql: string; params: SqlParam[] }): PackageRow[] {
  return db.all<PackageRow>(`SELECT ${COLUMNS} FROM packages pkg${filter ? ` WHERE ${filter.sql}` : ""} ORDER BY pkg.id`, filter?.params ?? []);
}

/** A row as the API answers it. */
export function toView(row: PackageRow): Package {
  return { id: row.id, created: rfc822(new Date(row.created)), sha256: row.sha256, driver: row.driver, metadata: JSON.parse(row.metadata) as PackageMetadata };
}

/**
 * Why an upload's form fields are refused, or undefined when they are fine. The version is
 * required; the device type too unless `deviceTypeRequired` is off (compat: the reference does not
 * check it, and a package without one is offered to no device).
 */
export function checkUploadFields(keys: PackageKeys, fields: ReadonlyMap<string, string>, hasFile: boolean, deviceTypeRequired = true): string | undefined {
  for (const key of fields.keys()) {
    if ((key !== keys.storageDirectory && key.startsWith(keys.reserved)) || key.startsWith(keys.signatureReserved) || key.startsWith(keys.deltaReserved)) return `provided metadata contains reserved key: ${key}`;
  }
  if (!hasFile) return "missing package file";
  for (const key of deviceTypeRequired ? [keys.version, keys.devtype] : [keys.version]) {
    const value = fields.get(key);
    if (value === undefined || value.trim() === "") return `missing required metadata: ${key}`;
  }
  return undefined;
}

export interface NewPackage {
  staged: StagedObject;
  /** Form fields (first value of each key), including the storage directory parameter. */
  fields: ReadonlyMap<string, string>;
  /** Normalised storage directory (`.` for the root). */
  dir: string;
  user: string | null;
  /** The signature check's verdict (signing.ts), when the gateway checks signatures. */
  signature?: SignatureMark;
  /** Runs inside the insert transaction (creator grants). */
  onCreated?: (tx: Tx, id: number) => void;
  actor: Actor;
}

/**
 * Moves the staged object into place, then commits the row: the object is complete and
 * fsynced before the row exists, and if the row cannot be written the object is removed.
 */
export async function createPackage(ctx: Pick<AppContext, "clock" | "config" | "db" | "log">, storage: LocalStorage, input: NewPackage, now = dateOf(ctx.clock)): Promise<PackageRow> {
  const keys = packageKeys(ctx.config.prefix);
  const stored = await storage.commit(input.staged, input.dir);
  // fromEntries defines own properties, so a field named `__proto__` is kept like any other key.
  const metadata: PackageMetadata = Object.fromEntries([...input.fields].filter(([key]) => key !== keys.storageDirectory));
  metadata[keys.localUuid] = stored.uuid;
  metadata[keys.localLength] = stored.size;
  metadata[keys.localDirectory] = stored.dir;
  if (input.signature) Object.assign(metadata, signatureMetadata(keys, input.signature));
  try {
    return await ctx.db.write((tx) => {
      const { lastInsertRowid: id } = tx.run(
        "INSERT INTO packages (created, sha256, driver, metadata, storage_dir, storage_name, size, version, devtype, created_by) VALUES (?, ?, 'local', ?, ?, ?, ?, ?, ?, ?)",
        [isoTime(now), stored.sha256, JSON.stringify(metadata), stored.dir, stored.name, stored.size, String(metadata[keys.version]), String(metadata[keys.devtype] ?? ""), input.user],
      );
      input.onCreated?.(tx, id);
      recordAudit(tx, input.actor, "package.upload", `package:${id}`, {
        version: metadata[keys.version],
        devtype: metadata[keys.devtype] ?? null,
        sha256: stored.sha256,
        size: stored.size,
        ...(input.signature ? { signature: input.signature.status, key: input.signature.key ?? null } : {}),
      });
      return getPackage(tx, id)!;
    });
  } catch (error) {
    await storage.remove(stored.name).catch(() => {});
    throw error;
  }
}

export type DeleteResult = "deleted" | "not_found" | "assigned";

/**
 * Deletes a package that no group holds: row (and, through `onDelete`, its permission rows)
 * in one transaction, then the object. A missing object counts as removed.
 */
export async function deletePackage(ctx: Pick<AppContext, "clock" | "config" | "db" | "log">, storage: LocalStorage, id: number, actor: Actor, onDelete?: (tx: Tx) => void): Promise<DeleteResult> {
  const result = await ctx.db.write((tx): { status: DeleteResult; name?: string } => {
    const row = getPackage(tx, id);
    if (!row) return { status: "not_found" };
    if (tx.get("SELECT 1 AS x FROM group_packages WHERE package_id = ? LIMIT 1", [id])) return { status: "assigned" };
    onDelete?.(tx);
    tx.run("DELETE FROM packages WHERE id = ?", [id]);
    recordAudit(tx, actor, "package.delete", `package:${id}`, { version: row.version, sha256: row.sha256 });
    return { status: "deleted", name: row.storage_name };
  });
  if (result.name) {
    // The row is gone, so the package is deleted; an object that will not go away now is
    // removed by the start-up sweep (sweepOrphanObjects).
    await storage
      .remove(result.name)
      .catch((error) => ctx.log.warn(`package ${id}: stored object ${result.name} not removed: ${(error as Error).message}`));
  }
  return result.status;
}

const UUID_NAME = /(?:^|\/)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Removes objects that never got a row (a crash between the file's rename and the row's commit). */
export async function sweepOrphanObjects(ctx: Pick<AppContext, "clock" | "config" | "db" | "log">, storage: LocalStorage): Promise<number> {
  const known = new Set(ctx.db.all<{ storage_name: string }>("SELECT storage_name FROM packages").map((r) => r.storage_name));
  let removed = 0;
  for (const name of storage.listObjects()) {
    if (known.has(name) || !UUID_NAME.test(name)) continue;
    await storage.remove(name);
    removed++;
  }
  if (removed) ctx.log.warn(`storage: removed ${removed} object(s) left by interrupted uploads`);
  return removed;
}
