import { resolve } from "node:path";
import { type Expression, type Selectable, type SqlBool } from "kysely";
import type { ImageReader, Queries, Store, Tx } from "../../db/store.ts";
import type { PackagesTable } from "../../db/schema.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import type { AppContext } from "../../app/context.ts";
import type { StagedObject } from "../../storage/local.ts";
import type { PackageStorage } from "../../storage/packages.ts";
import { dateOf, isoTime, rfc822 } from "../../util/time.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { LocalStorage, StorageNameError } from "../../storage/local.ts";
import { authorize, deletePermissionsOf, grantCreator, permissionFilter } from "../permissions/permissions.ts";
import { artifactPayloadTypes, fieldsWithArtifactHeader, uploadScopeRefusal } from "./artifact.ts";
import type { Package, PackageMetadata } from "./schema.ts";
import { signatureMetadata, type SignatureMark } from "./signing.ts";
import { packageKeys, type PackageKeys } from "./keys.ts";

export { packageKeys, type PackageKeys };

/** A package row as stored. */
export type PackageRow = Selectable<PackagesTable>;

const COLUMNS = ["pkg.id", "pkg.created", "pkg.sha256", "pkg.driver", "pkg.metadata", "pkg.storage_dir", "pkg.storage_name", "pkg.size", "pkg.version", "pkg.devtype", "pkg.created_by", "pkg.delta_target", "pkg.delta_base_version"] as const;

/** The packages table as every query here names it: alias `pkg` (a permission filter uses `p` for the permissions table itself). */
const packages = (q: Queries) => q.selectFrom("packages as pkg");

export async function getPackage(q: Queries, id: number): Promise<PackageRow | undefined> {
  return packages(q).select(COLUMNS).where("pkg.id", "=", id).executeTakeFirst();
}

export async function packageExists(q: Queries, id: number): Promise<boolean> {
  return (await packages(q).select("pkg.id").where("pkg.id", "=", id).executeTakeFirst()) !== undefined;
}

/** The metadata column of a package (JSON text), or undefined when there is no such package. */
export async function packageMetadataText(q: Queries, id: number): Promise<string | undefined> {
  return (await packages(q).select("pkg.metadata").where("pkg.id", "=", id).executeTakeFirst())?.metadata;
}

/** The storage names of the packages on the local driver, read from an embedded image at once, as a backup's snapshot takes them (src/backup/backup.ts); an S3 bucket's objects are not in a backup. */
export const storedNamesIn = (image: Pick<ImageReader, "all">): string[] =>
  image.all<{ storage_name: string }>("SELECT storage_name FROM packages WHERE driver = 'local' ORDER BY id").map((r) => r.storage_name);

/** Per storage root, the backups taking their snapshot now and what a deletion's object removal waits on. */
const removalHolds = new Map<string, { count: number; released: Promise<void>; release: () => void }>();

/**
 * Runs `fn` (a backup's snapshot and the links to its objects) while no package object under
 * `root` is removed: on PostgreSQL a deletion can commit after the snapshot began, and its object
 * must stay until the backup has linked it.
 */
export async function holdingObjectRemovals<T>(root: string, fn: () => Promise<T>): Promise<T> {
  const key = resolve(root);
  let hold = removalHolds.get(key);
  if (!hold) {
    let release = () => {};
    const released = new Promise<void>((done) => (release = done));
    hold = { count: 0, released, release };
    removalHolds.set(key, hold);
  }
  hold.count += 1;
  try {
    return await fn();
  } finally {
    if (--hold.count === 0) {
      removalHolds.delete(key);
      hold.release();
    }
  }
}

/** Resolves once no backup holds the object removals of `root`. */
async function objectRemovalsAllowed(root: string): Promise<void> {
  for (let hold = removalHolds.get(resolve(root)); hold; hold = removalHolds.get(resolve(root))) await hold.released;
}

/** The storage names of every package (what the object store must keep). */
export async function storedNames(q: Queries): Promise<string[]> {
  return (await packages(q).select("pkg.storage_name").orderBy("pkg.id").execute()).map((r) => r.storage_name);
}

export const PACKAGE_NOT_FOUND = "specified package does not exist";

/** The packages the caller may read, by id. */
export function readablePackages(q: Queries, identity: Identity): Promise<PackageRow[]> {
  return listPackages(q, permissionFilter(identity, "package", "pkg"));
}

/** A package the caller may read: 404 when there is none or the caller may not see it, 403 when they may see but not read it. */
export async function readablePackage(q: Queries, identity: Identity, id: number): Promise<PackageRow> {
  await authorize(q, identity, "package", id, "read");
  const row = await getPackage(q, id);
  if (!row) throw new LabgateError("not_found", PACKAGE_NOT_FOUND);
  return row;
}

/** The packages of `version` a deployment to a group would offer: the group's, and those it assigns first (`extra`). */
export async function packagesOfVersion(q: Queries, groupId: number, version: string, extra: readonly number[] = []): Promise<PackageRow[]> {
  return packages(q)
    .select(COLUMNS)
    .where("pkg.version", "=", version)
    .where((eb) => {
      const ofGroup = eb("pkg.id", "in", eb.selectFrom("group_packages").select("package_id").where("group_id", "=", groupId));
      return extra.length === 0 ? ofGroup : eb.or([ofGroup, eb("pkg.id", "in", [...extra])]);
    })
    .orderBy("pkg.id")
    .execute();
}

/** What an update check names of a delta the gateway made. */
export type DeltaOffer = Pick<PackageRow, "id" | "sha256" | "size" | "storage_name">;

type DeltasByTarget = Map<number, Map<string, DeltaOffer>>;

/**
 * Every delta the gateway made, in memory (each update check that offers a package asks for one):
 * loaded in one query, dropped by this module's own writes of the packages table (before and after
 * each, so that a load that overlapped one is not kept), by a reload of the embedded database, and
 * by another node's write (`deltasChangedElsewhere`).
 */
class DeltaIndex {
  private generation = 0;
  private loaded: { epoch: number; byTarget: DeltasByTarget } | undefined;
  private loading: Promise<DeltasByTarget> | undefined;
  private readonly store: Store;

  constructor(store: Store) {
    this.store = store;
  }

  changed(): void {
    this.generation++;
    this.loaded = undefined;
    this.loading = undefined;
  }

  /** The newest delta of `targetId` for `baseVersion`: at once when loaded, else once the load is done. */
  find(targetId: number, baseVersion: string): DeltaOffer | undefined | Promise<DeltaOffer | undefined> {
    if (this.loaded && this.loaded.epoch === this.store.epoch) return this.loaded.byTarget.get(targetId)?.get(baseVersion);
    return (this.loading ??= this.load()).then((byTarget) => byTarget.get(targetId)?.get(baseVersion));
  }

  private async load(): Promise<DeltasByTarget> {
    const generation = this.generation;
    const epoch = this.store.epoch;
    let rows;
    try {
      rows = await packages(this.store.query)
        .select(["pkg.id", "pkg.sha256", "pkg.size", "pkg.storage_name", "pkg.delta_target", "pkg.delta_base_version"])
        .where("pkg.delta_target", "is not", null)
        .orderBy("pkg.id")
        .execute();
    } finally {
      // Done or failed, this load is over: a check that finds nothing loaded starts another.
      if (generation === this.generation) this.loading = undefined;
    }
    const byTarget: DeltasByTarget = new Map();
    // Ascending ids: a later delta for the same base replaces an earlier one.
    for (const { delta_target, delta_base_version, ...delta } of rows) {
      let byBase = byTarget.get(delta_target!);
      if (!byBase) byTarget.set(delta_target!, (byBase = new Map()));
      byBase.set(delta_base_version ?? "", delta);
    }
    if (generation === this.generation) this.loaded = { epoch, byTarget };
    return byTarget;
  }
}

const deltaIndexes = new WeakMap<Store, DeltaIndex>();

const deltaIndexOf = (store: Store): DeltaIndex => {
  let index = deltaIndexes.get(store);
  if (!index) deltaIndexes.set(store, (index = new DeltaIndex(store)));
  return index;
};

/** The newest delta the gateway made of package `targetId` for devices on `baseVersion`, if any (on every update check that offers a package). */
export function deltaOf(store: Store, targetId: number, baseVersion: string): DeltaOffer | undefined | Promise<DeltaOffer | undefined> {
  return deltaIndexOf(store).find(targetId, baseVersion);
}

/** Another node wrote the packages table (its `deltas_changed`): this node's deltas are read again. */
export function deltasChangedElsewhere(store: Store): void {
  deltaIndexOf(store).changed();
}

/** Runs a write of the packages table: this node's deltas are dropped before and after it, the other nodes' once it committed. */
async function changingDeltas<T>(ctx: Pick<AppContext, "store" | "cluster">, write: () => Promise<T>): Promise<T> {
  const index = deltaIndexOf(ctx.store);
  index.changed();
  try {
    return await write();
  } finally {
    index.changed();
    ctx.cluster.publish("deltas_changed");
  }
}

/** The oldest full package (not a delta) of `version` for `devtype`: what a delta is made from. */
export async function fullPackageOf(q: Queries, version: string, devtype: string): Promise<PackageRow | undefined> {
  return packages(q)
    .select(COLUMNS)
    .where("pkg.version", "=", version)
    .where("pkg.devtype", "=", devtype)
    .where("pkg.delta_target", "is", null)
    .orderBy("pkg.id")
    .limit(1)
    .executeTakeFirst();
}

/** The packages `filter` lets through (a permission filter on the alias `pkg`), by id. */
export async function listPackages(q: Queries, filter?: Expression<SqlBool>): Promise<PackageRow[]> {
  return packages(q)
    .select(COLUMNS)
    .$if(filter !== undefined, (qb) => qb.where(filter!))
    .orderBy("pkg.id")
    .execute();
}

/** The indexed columns of a delta the gateway made (its metadata says what it rebuilds, from what). */
function deltaColumns(keys: PackageKeys, metadata: PackageMetadata): Pick<PackagesTable, "delta_target" | "delta_base_version"> {
  const target = metadata[keys.deltaTarget];
  if (target === undefined) return { delta_target: null, delta_base_version: null };
  return { delta_target: Number(target), delta_base_version: String(metadata[`requires:${keys.version}`]) };
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
  onCreated?: (tx: Tx, id: number) => Promise<void>;
  actor: Actor;
}

/** What the package functions use of the server. */
export type PackageContext = Pick<AppContext, "clock" | "config" | "store" | "log" | "cluster">;

/**
 * Moves the staged object into place, then commits the row: the object is complete and
 * fsynced before the row exists, and if the row cannot be written the object is removed.
 */
export async function createPackage(ctx: PackageContext, storage: PackageStorage, input: NewPackage, now = dateOf(ctx.clock)): Promise<PackageRow> {
  const keys = packageKeys(ctx.config.prefix);
  const stored = await storage.commit(input.staged, input.dir);
  // fromEntries defines own properties, so a field named `__proto__` is kept like any other key.
  const metadata: PackageMetadata = Object.fromEntries([...input.fields].filter(([key]) => key !== keys.storageDirectory));
  if (storage.driver === "s3") {
    metadata[keys.s3Uuid] = stored.uuid;
    metadata[keys.s3Size] = stored.size;
    metadata[keys.s3Directory] = stored.dir;
  } else {
    metadata[keys.localUuid] = stored.uuid;
    metadata[keys.localLength] = stored.size;
    metadata[keys.localDirectory] = stored.dir;
  }
  if (input.signature) Object.assign(metadata, signatureMetadata(keys, input.signature));
  const columns = deltaColumns(keys, metadata);
  const insert = () =>
    ctx.store.transact(async (tx) => {
      const { id } = await tx
        .insertInto("packages")
        .values({
          created: isoTime(now),
          sha256: stored.sha256,
          driver: storage.driver,
          metadata: JSON.stringify(metadata),
          storage_dir: stored.dir,
          storage_name: stored.name,
          size: stored.size,
          version: String(metadata[keys.version]),
          devtype: String(metadata[keys.devtype] ?? ""),
          created_by: input.user,
          ...columns,
        })
        .returning("id")
        .executeTakeFirstOrThrow();
      await input.onCreated?.(tx, id);
      await recordAudit(tx, input.actor, "package.upload", `package:${id}`, {
        version: metadata[keys.version],
        devtype: metadata[keys.devtype] ?? null,
        sha256: stored.sha256,
        size: stored.size,
        ...(input.signature ? { signature: input.signature.status, key: input.signature.key ?? null } : {}),
      });
      return (await getPackage(tx, id))!;
    });
  try {
    return await (columns.delta_target === null ? insert() : changingDeltas(ctx, insert));
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
export async function deletePackage(ctx: PackageContext, storage: PackageStorage, id: number, actor: Actor, onDelete?: (tx: Tx) => Promise<void>): Promise<DeleteResult> {
  // Any package may be a delta: a deletion (rare) drops them all.
  const result = await changingDeltas(ctx, () => ctx.store.transact(async (tx): Promise<{ status: DeleteResult; name?: string }> => {
    const row = await getPackage(tx, id);
    if (!row) return { status: "not_found" };
    if (await packages(tx).innerJoin("group_packages as gp", "gp.package_id", "pkg.id").select("gp.group_id").where("pkg.id", "=", id).limit(1).executeTakeFirst()) return { status: "assigned" };
    await onDelete?.(tx);
    await tx.deleteFrom("packages").where("id", "=", id).execute();
    await recordAudit(tx, actor, "package.delete", `package:${id}`, { version: row.version, sha256: row.sha256 });
    return { status: "deleted", name: row.storage_name };
  }));
  if (result.name) {
    // The row is gone, so the package is deleted; an object that will not go away now is
    // removed by the start-up sweep (sweepOrphanObjects).
    // A backup links only the local driver's objects; a bucket's objects are not in it.
    if (storage.objects instanceof LocalStorage) await objectRemovalsAllowed(storage.objects.root);
    await storage
      .remove(result.name)
      .catch((error) => ctx.log.warn(`package ${id}: stored object ${result.name} not removed: ${(error as Error).message}`));
  }
  return result.status;
}

/** What an upload brings: the staged object and the form's text fields. */
export interface PackageUpload {
  staged: StagedObject | undefined;
  fields: ReadonlyMap<string, string>;
  /** The signature check's verdict, made as the bytes streamed in (signing.ts). */
  signature?: SignatureMark;
}

/**
 * The caller uploads a package: its fields checked, its upload scope by the artifact's payload
 * types (read from the stored bytes), the object moved into place and the row committed with the
 * creator's grant and its audit row. The staged object goes whatever fails.
 */
export async function uploadPackage(ctx: PackageContext, storage: PackageStorage, identity: Identity, upload: PackageUpload, actor: Actor): Promise<PackageRow> {
  if (identity.kind !== "mgmt") throw new LabgateError("unauthenticated", "a management token is required");
  const keys = packageKeys(ctx.config.prefix);
  const { staged, signature } = upload;
  try {
    // A Mender artifact names its version and device types: the form need not repeat them.
    const fields = staged ? await fieldsWithArtifactHeader(staged.tmpPath, upload.fields, keys) : upload.fields;
    const problem = checkUploadFields(keys, fields, staged !== undefined, ctx.config.compat.package_device_type_required);
    if (problem) throw new LabgateError("invalid", problem);
    const dir = storage.normalizeDir(fields.get(keys.storageDirectory));
    const refusal = uploadScopeRefusal(identity.scopes, await artifactPayloadTypes(staged!.tmpPath), ctx.config.prefix);
    if (refusal) throw new LabgateError("forbidden", refusal);
    return await createPackage(ctx, storage, { staged: staged!, fields, dir, user: identity.user, signature, onCreated: (tx, id) => grantCreator(tx, identity, "package", id, dateOf(ctx.clock)), actor });
  } catch (error) {
    if (staged) await storage.discard(staged); // no-op once the object was moved into place
    // A directory that is not allowed, or that cannot be made (normalizeDir, commit).
    if (error instanceof StorageNameError) throw new LabgateError("invalid", `invalid ${keys.storageDirectory}: ${error.message}`);
    throw error;
  }
}

/** The caller deletes a package (with its permission rows): 404 when there is none, 409 while a group holds it. */
export async function removePackage(ctx: PackageContext, storage: PackageStorage, identity: Identity, id: number, actor: Actor): Promise<void> {
  await authorize(ctx.store.query, identity, "package", id, "delete");
  const result = await deletePackage(ctx, storage, id, actor, (tx) => deletePermissionsOf(tx, "package", id));
  if (result === "not_found") throw new LabgateError("not_found", PACKAGE_NOT_FOUND);
  if (result === "assigned") throw new LabgateError("conflict", "delete failed, the package is assigned to at least one group");
}

const UUID_NAME = /(?:^|\/)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Removes objects that never got a row (a crash between the file's rename and the row's commit). */
export async function sweepOrphanObjects(ctx: PackageContext, storage: PackageStorage): Promise<number> {
  const known = new Set(await storedNames(ctx.store.query));
  let removed = 0;
  for (const name of await storage.listObjects()) {
    if (known.has(name) || !UUID_NAME.test(name)) continue;
    await storage.remove(name);
    removed++;
  }
  if (removed) ctx.log.warn(`storage: removed ${removed} object(s) left by interrupted uploads`);
  return removed;
}
