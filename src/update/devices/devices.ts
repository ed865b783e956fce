import { sql, type Expression, type Selectable, type SqlBool } from "kysely";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { likeIgnoringCase, metadataText } from "../../db/dialect.ts";
import type { DevicesTable } from "../../db/schema.ts";
import type { Engine, Queries, Store, Tx } from "../../db/store.ts";
import { rfc822 } from "../../util/time.ts";
import { deletePermissionsOf, type ChangeGuard } from "../permissions/permissions.ts";
import { metaKeys, type Metadata } from "./metadata.ts";
import type { Device, DeviceSort, DeviceV1 } from "./schema.ts";

/** A device row as stored (JSON columns still text). */
export type DeviceRow = Selectable<DevicesTable>;

/** A condition on devices (alias `d`), e.g. a permission filter. */
export type DeviceFilter = Expression<SqlBool>;


const byId = (q: Queries, id: number) => q.selectFrom("devices").selectAll().where("id", "=", id);

export function getDevice(q: Queries, id: number): Promise<DeviceRow | undefined> {
  return byId(q, id).executeTakeFirst();
}

const byMac = (q: Queries, mac: string) => q.selectFrom("devices").selectAll().where("mac_address", "=", mac);

export function getDeviceByMac(q: Queries, mac: string): Promise<DeviceRow | undefined> {
  return byMac(q, mac).executeTakeFirst();
}

/** A device list's order: by one of DEVICE_SORTS, ties by id (so pages never overlap). */
export interface DeviceOrder {
  sort?: DeviceSort;
  descending?: boolean;
}

/**
 * The ORDER BY of an order; the names are fixed here, never taken from the request. NULLs (no
 * version, never seen) come first ascending and last descending on both engines, as SQLite orders.
 */
function orderBy(engine: Engine, prefix: string, order: DeviceOrder) {
  if (!order.sort || order.sort === "id") return order.descending ? sql`d.id DESC` : sql`d.id ASC`;
  const keys = metaKeys(prefix);
  const column: Record<Exclude<DeviceSort, "id">, Expression<unknown>> = {
    name: sql`lower(d.name)`,
    mac_address: sql.ref("d.mac_address"),
    version: metadataText(engine, "d.metadata", keys.version),
    type: metadataText(engine, "d.metadata", keys.devtype),
    last_access: sql.ref("d.last_access"),
  };
  return sql`${column[order.sort]} ${order.descending ? sql`DESC NULLS LAST` : sql`ASC NULLS FIRST`}, d.id`;
}

/** Devices (alias `d`), optionally narrowed by `where` (e.g. a permission filter), in `order`; `page`: only that many from that position. */
export function listDevices(store: Pick<Store, "engine" | "query">, where?: DeviceFilter, page?: { limit?: number; offset?: number }, order: DeviceOrder & { prefix?: string } = {}): Promise<DeviceRow[]> {
  const { query: q, engine } = store;
  let query = q
    .selectFrom("devices as d")
    .selectAll("d")
    .$if(where !== undefined, (qb) => qb.where(where!))
    .orderBy(orderBy(engine, order.prefix ?? "", order));
  // SQLite takes no OFFSET without a LIMIT.
  if (page?.limit !== undefined || page?.offset) query = query.limit(page.limit ?? Number.MAX_SAFE_INTEGER);
  if (page?.offset) query = query.offset(page.offset);
  return query.execute();
}

const counted = (q: Queries, where?: DeviceFilter) =>
  q
    .selectFrom("devices as d")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .$if(where !== undefined, (qb) => qb.where(where!));

export function countDevices(q: Queries, where?: DeviceFilter): Promise<number> {
  return counted(q, where)
    .executeTakeFirstOrThrow()
    .then((row) => Number(row.n));
}

/** Both conditions (either may be absent). */
export function bothFilters(a: DeviceFilter | undefined, b: DeviceFilter | undefined): DeviceFilter | undefined {
  return a && b ? sql<SqlBool>`(${a}) AND (${b})` : (a ?? b);
}

/**
 * The device list's text filter (`q`): `text` within the name, MAC address, id, software
 * version or device type, ignoring (ASCII) case, on `engine`.
 */
export function deviceTextFilter(prefix: string, text: string, engine: Engine): DeviceFilter {
  const pattern = `%${text.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`;
  const keys = metaKeys(prefix);
  const fields = [sql`d.name`, sql`d.mac_address`, sql`CAST(d.id AS TEXT)`, metadataText(engine, "d.metadata", keys.version), metadataText(engine, "d.metadata", keys.devtype)];
  return sql<SqlBool>`(${sql.join(
    fields.map((f) => likeIgnoringCase(f, pattern)),
    sql` OR `,
  )})`;
}

const idOf = (q: Queries, id: number) => q.selectFrom("devices").select("id").where("id", "=", id);

export function deviceExists(q: Queries, id: number): Promise<boolean> {
  return idOf(q, id)
    .executeTakeFirst()
    .then((row) => row !== undefined);
}

const macOf = (q: Queries, id: number) => q.selectFrom("devices").select("mac_address").where("id", "=", id);

export function deviceMac(q: Queries, id: number): Promise<string | undefined> {
  return macOf(q, id)
    .executeTakeFirst()
    .then((row) => row?.mac_address);
}

const idByMac = (q: Queries, mac: string) => q.selectFrom("devices").select("id").where("mac_address", "=", mac);

export function deviceIdByMac(q: Queries, mac: string): Promise<number | undefined> {
  return idByMac(q, mac)
    .executeTakeFirst()
    .then((row) => row?.id);
}

const macsWhere = (q: Queries, where: DeviceFilter) => q.selectFrom("devices as d").select("d.mac_address").where(where);

/** The MACs of the devices (alias `d`) a condition selects, e.g. a permission filter. */
export function deviceMacs(q: Queries, where: DeviceFilter): Promise<Set<string>> {
  const set = (rows: Array<{ mac_address: string }>) => new Set(rows.map((r) => r.mac_address));
  return macsWhere(q, where).execute().then(set);
}

const namesWhere = (q: Queries, where: DeviceFilter | undefined, limit: number) =>
  q
    .selectFrom("devices as d")
    .select(["d.id", "d.mac_address", "d.name"])
    .$if(where !== undefined, (qb) => qb.where(where!))
    .orderBy("d.name")
    .orderBy("d.id")
    .limit(limit);

/** Id, MAC and name of the devices `where` selects (all when absent), by name, at most `limit`. */
export function deviceNames(q: Queries, where: DeviceFilter | undefined, limit: number): Promise<Array<{ id: number; mac_address: string; name: string }>> {
  return namesWhere(q, where, limit).execute();
}

const tagsWhere = (q: Queries, where: DeviceFilter | undefined) =>
  q
    .selectFrom("device_tags as dt")
    .innerJoin("devices as d", "d.id", "dt.device_id")
    .select((eb) => ["dt.tag", eb.fn.countAll<number>().as("n")])
    .$if(where !== undefined, (qb) => qb.where(where!))
    .groupBy("dt.tag")
    .orderBy("dt.tag");

/** Each tag of the devices `where` selects (all when absent), with how many of them carry it, by tag. */
export function tagCounts(q: Queries, where: DeviceFilter | undefined): Promise<Array<{ tag: string; n: number }>> {
  const numbers = (rows: Array<{ tag: string; n: unknown }>) => rows.map((r) => ({ tag: r.tag, n: Number(r.n) }));
  return tagsWhere(q, where).execute().then(numbers);
}

const outside = (q: Queries, where: DeviceFilter, groupId: number) =>
  q
    .selectFrom("devices as d")
    .select("d.id")
    .where(where)
    .where("d.id", "not in", (eb) => eb.selectFrom("group_devices").select("device_id").where("group_id", "=", groupId))
    .orderBy("d.id");

/** The ids of the devices `where` selects that are not members of the group, in id order. */
export function deviceIdsOutsideGroup(q: Queries, where: DeviceFilter, groupId: number): Promise<number[]> {
  const ids = (rows: Array<{ id: number }>) => rows.map((r) => r.id);
  return outside(q, where, groupId).execute().then(ids);
}

/** Rows per statement of groupMemberKey: a statement runs between two turns of the event loop. */
const MEMBER_PAGE = 1000;

/** The devices of a group with one key of their metadata (null: absent), in id order; `between` runs between two pages. */
export async function groupMemberKey(q: Queries, engine: Engine, groupId: number, key: string, between: () => Promise<void>): Promise<Array<{ id: number; value: string | null }>> {
  const out: Array<{ id: number; value: string | null }> = [];
  for (let after = 0; ; ) {
    const page = await q
      .selectFrom("group_devices as gd")
      .innerJoin("devices as d", "d.id", "gd.device_id")
      .select(["d.id", metadataText(engine, "d.metadata", key).as("value")])
      .where("gd.group_id", "=", groupId)
      .where("gd.device_id", ">", after)
      .orderBy("gd.device_id")
      .limit(MEMBER_PAGE)
      .execute();
    out.push(...page);
    if (page.length < MEMBER_PAGE) return out;
    after = page[page.length - 1].id;
    await between();
  }
}

/** The devices that carry a tag, as a condition on `d` (for listDevices). */
export function taggedFilter(tag: string): DeviceFilter {
  return sql<SqlBool>`EXISTS (SELECT 1 FROM device_tags t WHERE t.device_id = d.id AND t.tag = ${tag})`;
}

/**
 * Per MAC of `macs` that names a device `readable` selects: whether `wanted` selects it too (both
 * conditions on `d`; one query whatever the number of MACs).
 */
export async function macsMatching(q: Queries, macs: readonly string[], readable: DeviceFilter, wanted: DeviceFilter): Promise<Array<{ mac_address: string; w: number }>> {
  if (macs.length === 0) return [];
  const rows = await q
    .selectFrom("devices as d")
    .select(["d.mac_address", sql<number>`CASE WHEN ${wanted} THEN 1 ELSE 0 END`.as("w")])
    .where("d.mac_address", "in", [...macs])
    .where(readable)
    .execute();
  return rows.map((r) => ({ mac_address: r.mac_address, w: Number(r.w) }));
}

/** The metadata column of a device as an object (a broken column reads as empty); undefined when there is no such device. */
export async function deviceMetadataOf(q: Queries, id: number): Promise<Record<string, unknown> | undefined> {
  const row = await q.selectFrom("devices").select("metadata").where("id", "=", id).executeTakeFirst();
  if (!row) return undefined;
  try {
    return JSON.parse(row.metadata) as Record<string, unknown>;
  } catch {
    return {};
  }
}

/** Replaces a device's metadata (already JSON text). */
export async function setDeviceMetadata(q: Queries, id: number, metadataText: string): Promise<void> {
  await q.updateTable("devices").set({ metadata: metadataText }).where("id", "=", id).execute();
}

/** Replaces a device's capabilities (already JSON text). */
export async function setDeviceCapabilities(q: Queries, id: number, capabilitiesText: string): Promise<void> {
  await q.updateTable("devices").set({ capabilities: capabilitiesText }).where("id", "=", id).execute();
}

/** What an approved registration makes of a device: a new row, or the key and metadata of a known one. */
export interface ApprovedDevice {
  publicKey: string;
  fingerprint: string;
  metadataText: string;
  name: string;
  at: string;
}

/** A device made from an approved registration, with the tags its metadata names; its id. */
export async function insertDevice(tx: Tx, mac: string, device: ApprovedDevice & { created: string; tags: readonly string[] }): Promise<number> {
  const { id } = await tx
    .insertInto("devices")
    .values({
      created: device.created,
      name: device.name,
      mac_address: mac,
      public_key: device.publicKey,
      key_fingerprint: device.fingerprint,
      capabilities: "{}",
      metadata: device.metadataText,
      last_access: device.at,
    })
    .returning("id")
    .executeTakeFirstOrThrow();
  if (device.tags.length > 0) {
    await tx
      .insertInto("device_tags")
      .values(device.tags.map((tag) => ({ device_id: id, tag })))
      .onConflict((oc) => oc.doNothing())
      .execute();
  }
  return id;
}

/** Gives a known device an approved key, metadata and name. */
export async function rekeyDevice(tx: Tx, id: number, device: ApprovedDevice): Promise<void> {
  await tx
    .updateTable("devices")
    .set({ public_key: device.publicKey, key_fingerprint: device.fingerprint, metadata: device.metadataText, name: device.name, last_access: device.at })
    .where("id", "=", id)
    .execute();
}

export async function deviceTags(q: Queries, deviceId: number): Promise<string[]> {
  const rows = await q.selectFrom("device_tags").select("tag").where("device_id", "=", deviceId).orderBy("tag").execute();
  return rows.map((r) => r.tag);
}

const parseObject = <T>(text: string): T => {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : ({} as T);
  } catch {
    return {} as T;
  }
};

const formatTime = (iso: string | null): string | null => (iso ? rfc822(new Date(iso)) : null);

function baseShape(row: DeviceRow) {
  return {
    id: row.id,
    name: row.name,
    mac_address: row.mac_address,
    capabilities: parseObject<Record<string, unknown>>(row.capabilities),
    metadata: parseObject<Metadata>(row.metadata),
    last_access: formatTime(row.last_access),
    public_key: row.public_key,
  };
}

/** Which devices hold an open management socket (ChannelHub). */
export interface DevicePresence {
  isConnected(mac: string): boolean;
}

/** Devices asked at once, at most (bound parameters of one statement). */
const MEMBERSHIP_BATCH = 1000;

/** The groups of each device of `ids` with their priorities, by (priority, group id): one query per thousand devices. */
async function membershipsOf(q: Queries, ids: readonly number[]): Promise<Map<number, Array<{ group: number; priority: number }>>> {
  const out = new Map<number, Array<{ group: number; priority: number }>>();
  for (let i = 0; i < ids.length; i += MEMBERSHIP_BATCH) {
    const rows = await q
      .selectFrom("group_devices as gd")
      .innerJoin("groups as g", "g.id", "gd.group_id")
      .select(["gd.device_id", "gd.group_id", "g.priority"])
      .where("gd.device_id", "in", ids.slice(i, i + MEMBERSHIP_BATCH))
      .orderBy("gd.device_id")
      .orderBy("g.priority")
      .orderBy("gd.group_id")
      .execute();
    for (const r of rows) out.set(r.device_id, [...(out.get(r.device_id) ?? []), { group: r.group_id, priority: r.priority }]);
  }
  return out;
}

/** The v2 device objects of `rows`; `connected`: whether a device holds a management socket now (ChannelHub.isConnected). */
export async function devicesV2(q: Queries, rows: readonly DeviceRow[], connected: (row: DeviceRow) => boolean): Promise<Device[]> {
  const groups = await membershipsOf(q, rows.map((r) => r.id));
  return rows.map((row) => ({ ...baseShape(row), groups: (groups.get(row.id) ?? []).map((m) => m.group).sort((x, y) => x - y), connected: connected(row) }));
}

/** The v1 device objects of `rows`: `group` is the one whose policy applies (lowest priority value, ties: lowest id). */
export async function devicesV1(q: Queries, rows: readonly DeviceRow[]): Promise<DeviceV1[]> {
  const groups = await membershipsOf(q, rows.map((r) => r.id));
  return rows.map((row) => ({ ...baseShape(row), group: groups.get(row.id)?.[0]?.group ?? null }));
}

export async function toV2(q: Queries, row: DeviceRow, connected: boolean): Promise<Device> {
  return (await devicesV2(q, [row], () => connected))[0];
}

export async function toV1(q: Queries, row: DeviceRow): Promise<DeviceV1> {
  return (await devicesV1(q, [row]))[0];
}

/**
 * Work other domains must do inside the deletion transaction of a device (e.g. records keyed by
 * MAC rather than by a foreign key). Rows that reference devices(id) ON DELETE CASCADE
 * (tags, group memberships, progress) need no hook. A hook may return work to do once the
 * deletion is committed (closing a socket, removing files, forgetting it in a cache); the
 * deletion answers after it. The transaction may run more than once (PostgreSQL): a hook's
 * body only queries.
 */
export type DeviceDeletionHook = (tx: Tx, device: DeviceRow) => Promise<void | (() => void | Promise<void>)>;
/** Runs once an approved key change of a device is on disk (its old tokens and socket must go). */
export type DeviceRekeyHook = (device: { id: number; mac_address: string }) => void;

/** What other parts do when a device is deleted or its key changes; createUpdateDomain installs them. */
export class DeviceHooks {
  readonly deleted = new Set<DeviceDeletionHook>();
  private readonly rekeyed = new Set<DeviceRekeyHook>();

  onDeleted(hook: DeviceDeletionHook): void {
    this.deleted.add(hook);
  }

  onRekeyed(hook: DeviceRekeyHook): void {
    this.rekeyed.add(hook);
  }

  /** Tells the hooks that a device's key changed (call after the commit). */
  keyChanged(device: { id: number; mac_address: string }): void {
    for (const hook of this.rekeyed) hook(device);
  }
}

/**
 * Deletes a device and everything that depends on it, in one transaction: tags, group
 * memberships (cascade), its `device` permission rows, and whatever hooks other domains
 * registered (its pending registrations among them). Its tokens are refused from then on (deviceGate: the row is
 * gone and ids are never reused). False when there is no such device.
 */
export async function deleteDevice(store: Store, hooks: DeviceHooks, id: number, actor: Actor): Promise<boolean> {
  const { deleted, afterCommit } = await store.transact(async (tx) => {
    const afterCommit: Array<() => void | Promise<void>> = [];
    const device = await getDevice(tx, id);
    if (!device) return { deleted: false, afterCommit };
    for (const hook of hooks.deleted) {
      const after = await hook(tx, device);
      if (after) afterCommit.push(after);
    }
    await deletePermissionsOf(tx, "device", id);
    await tx.deleteFrom("devices").where("id", "=", id).execute();
    await recordAudit(tx, actor, "device.delete", `device:${id}`, { mac: device.mac_address, name: device.name });
    return { deleted: true, afterCommit };
  });
  for (const after of afterCommit) await after();
  return deleted;
}

/** Tags: printable, no slash (they appear in paths), at most 128 characters. */
export function validTag(tag: string): boolean {
  return tag.length > 0 && tag.length <= 128 && !/[\/\u0000-\u001f\u007f]/.test(tag);
}

/**
 * Adds a tag; adding one that is already there is a no-op. False when the device does not exist.
 * `guard` runs the change (the escalation rule: a tag can grant permissions, see permissions.ts).
 */
export async function addTag(store: Store, deviceId: number, tag: string, guard: ChangeGuard, actor: Actor): Promise<boolean> {
  if (!(await deviceExists(store.query, deviceId))) return false;
  if (await store.query.selectFrom("device_tags").select("tag").where("device_id", "=", deviceId).where("tag", "=", tag).executeTakeFirst()) return true;
  return store.transact(async (tx) => {
    if (!(await deviceExists(tx, deviceId))) return false;
    await guard(tx, async () => void (await tx.insertInto("device_tags").values({ device_id: deviceId, tag }).onConflict((oc) => oc.doNothing()).execute()));
    await recordAudit(tx, actor, "device.tag", `device:${deviceId}`, { add: tag });
    return true;
  });
}

/**
 * Renames a device (a management request; the device's own reports never rename it).
 * False when the device does not exist. `guard` runs the change: a name can grant permissions.
 */
export async function renameDevice(store: Store, deviceId: number, name: string, guard: ChangeGuard, actor: Actor): Promise<boolean> {
  return store.transact(async (tx) => {
    const device = await getDevice(tx, deviceId);
    if (!device) return false;
    await guard(tx, async () => void (await tx.updateTable("devices").set({ name }).where("id", "=", deviceId).execute()));
    await recordAudit(tx, actor, "device.rename", `device:${deviceId}`, { from: device.name, to: name });
    return true;
  });
}

/** Removes a tag (absent: no-op). False when the device does not exist. */
export async function removeTag(store: Store, deviceId: number, tag: string, actor: Actor): Promise<boolean> {
  if (!(await deviceExists(store.query, deviceId))) return false;
  await store.transact(async (tx) => {
    const removed = await tx.deleteFrom("device_tags").where("device_id", "=", deviceId).where("tag", "=", tag).executeTakeFirst();
    if (Number(removed.numDeletedRows) > 0) await recordAudit(tx, actor, "device.tag", `device:${deviceId}`, { remove: tag });
  });
  return true;
}

/** Tags as given by a device in its metadata: a list, or one string with one tag per line or comma. */
export function tagsFromMetadata(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const items = Array.isArray(value) ? value : value.split(/[\n,]/);
  return [...new Set(items.map((t) => t.trim()).filter(validTag))];
}

const signing = (q: Queries, engine: Engine, groupId: number, prefix: string) =>
  q
    .selectFrom("devices as d")
    .innerJoin("group_devices as gd", "gd.device_id", "d.id")
    .select(["d.id", "d.metadata"])
    .where("gd.group_id", "=", groupId)
    .where(metadataText(engine, "d.metadata", `${prefix}.update.verify_keys`), "is not", null)
    .orderBy("d.id");

/**
 * The devices of a group whose agents require signed updates (they report the fingerprints of
 * their verify_keys as `<prefix>.update.verify_keys`), with their device type and those keys.
 */
export function signatureRequirements(store: Pick<Store, "engine" | "query">, groupId: number, prefix: string): Promise<SignatureRequirement[]> {
  const { query: q, engine } = store;
  const requirements = (rows: Array<{ id: number; metadata: string }>) =>
    rows.flatMap((row) => {
      const metadata = JSON.parse(row.metadata) as Record<string, unknown>;
      const listed = metadata[`${prefix}.update.verify_keys`];
      const keys = (Array.isArray(listed) ? listed : [listed]).filter((k): k is string => typeof k === "string" && k !== "");
      return keys.length === 0 ? [] : [{ id: row.id, devtype: String(metadata[`${prefix}.hardware.devtype`] ?? ""), keys }];
    });
  const query = signing(q, engine, groupId, prefix);
  return query.execute().then(requirements);
}

export interface SignatureRequirement {
  id: number;
  devtype: string;
  keys: string[];
}

/** The software versions devices of `devtype` run now (what update_server.deltas auto makes deltas from). */
export function versionsRunning(store: Pick<Store, "engine" | "query">, prefix: string, devtype: string): Promise<string[]> {
  const { query: q, engine } = store;
  const keys = metaKeys(prefix);
  const query = q
    .selectFrom("devices as d")
    .select(metadataText(engine, "d.metadata", keys.version).as("version"))
    .distinct()
    .where(metadataText(engine, "d.metadata", keys.devtype), "=", devtype);
  const versions = (rows: Array<{ version: unknown }>) => rows.map((row) => row.version).filter((v): v is string => typeof v === "string" && v !== "");
  return query.execute().then(versions);
}

/** Replaces a device's reported metadata (what another protocol's inventory or update check reports). */
export async function replaceDeviceMetadata(q: Queries, deviceId: number, metadata: Metadata): Promise<void> {
  const text = JSON.stringify(metadata);
  if ((await getDevice(q, deviceId))?.metadata === text) return;
  await setDeviceMetadata(q, deviceId, text);
}
