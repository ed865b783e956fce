import type { Database, Tx } from "../../db/index.ts";
import { Kysely, sql } from "kysely";
import type { Queries } from "../../db/store.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { rfc822 } from "../../util/time.ts";
import { type SqlFilter } from "../permissions/permissions.ts";
import { type ChangeGuardInWrite, deletePermissionsOfInWrite } from "../permissions/legacy.ts";
import { metaKeys, type Metadata } from "./metadata.ts";
import type { Device, DeviceSort, DeviceV1 } from "./schema.ts";

/** A device row as stored (JSON columns still text). */
export interface DeviceRow {
  id: number;
  created: string;
  name: string;
  mac_address: string;
  public_key: string | null;
  key_fingerprint: string | null;
  capabilities: string;
  metadata: string;
  last_access: string | null;
}

const COLUMNS = "d.id, d.created, d.name, d.mac_address, d.public_key, d.key_fingerprint, d.capabilities, d.metadata, d.last_access";

export function getDevice(db: Database | Tx, id: number): DeviceRow | undefined {
  return db.get<DeviceRow>(`SELECT ${COLUMNS} FROM devices d WHERE d.id = ?`, [id]);
}

export function getDeviceByMac(db: Database | Tx, mac: string): DeviceRow | undefined {
  return db.get<DeviceRow>(`SELECT ${COLUMNS} FROM devices d WHERE d.mac_address = ?`, [mac]);
}

/**
 * Devices (alias `d`), optionally narrowed by an SQL condition on `d` (e.g. a permission filter
 * from permissions.ts), ordered by id; `page`: only that many from that position.
 */
/** A device list's order: by one of DEVICE_SORTS, ties by id (so pages never overlap). */
export interface DeviceOrder {
  sort?: DeviceSort;
  descending?: boolean;
}

/** The SQL of an order; the names are fixed here, never taken from the request. */
function orderBy(prefix: string, order: DeviceOrder): string {
  const keys = metaKeys(prefix);
  const column: Record<DeviceSort, string> = {
    id: "d.id",
    name: "d.name COLLATE NOCASE",
    mac_address: "d.mac_address",
    version: `json_extract(d.metadata, '$."${keys.version}"')`,
    type: `json_extract(d.metadata, '$."${keys.devtype}"')`,
    last_access: "d.last_access",
  };
  const way = order.descending ? "DESC" : "ASC";
  return !order.sort || order.sort === "id" ? `d.id ${way}` : `${column[order.sort]} ${way}, d.id`;
}

export function listDevices(db: Database, where?: SqlFilter, page?: { limit?: number; offset?: number }, order: DeviceOrder & { prefix?: string } = {}): DeviceRow[] {
  const clause = where ? ` WHERE ${where.sql}` : "";
  const params = where?.params ?? [];
  const by = orderBy(order.prefix ?? "", order);
  if (!page) return db.all<DeviceRow>(`SELECT ${COLUMNS} FROM devices d${clause} ORDER BY ${by}`, params);
  return db.all<DeviceRow>(`SELECT ${COLUMNS} FROM devices d${clause} ORDER BY ${by} LIMIT ? OFFSET ?`, [...params, page.limit ?? -1, page.offset ?? 0]);
}

export function countDevices(db: Database, where?: SqlFilter): number {
  return db.get<{ n: number }>(`SELECT COUNT(*) AS n FROM devices d${where ? ` WHERE ${where.sql}` : ""}`, where?.params ?? [])!.n;
}

/** Both conditions (either may be absent). */
export function bothFilters(a: SqlFilter | undefined, b: SqlFilter | undefined): SqlFilter | undefined {
  if (!a || !b) return a ?? b;
  return { sql: `(${a.sql}) AND (${b.sql})`, params: [...a.params, ...b.params] };
}

/**
 * The device list's text filter (`q`): `text` within the name, MAC address, id, software
 * version or device type, ignoring (ASCII) case, as SQLite's LIKE compares.
 */
export function deviceTextFilter(prefix: string, text: string): SqlFilter {
  const pattern = `%${text.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`;
  const keys = metaKeys(prefix);
  // The prefix is lowercase letters and digits (config.ts): safe inside a JSON path.
  const fields = ["d.name", "d.mac_address", "CAST(d.id AS TEXT)", `json_extract(d.metadata, '$."${keys.version}"')`, `json_extract(d.metadata, '$."${keys.devtype}"')`];
  return { sql: fields.map((f) => `${f} LIKE ? ESCAPE '\\'`).join(" OR "), params: fields.map(() => pattern) };
}

export function deviceGroupIds(db: Database | Tx, deviceId: number): number[] {
  return db
    .all<{ group_id: number }>("SELECT gd.group_id FROM devices d JOIN group_devices gd ON gd.device_id = d.id WHERE d.id = ? ORDER BY gd.group_id", [deviceId])
    .map((r) => r.group_id);
}

/** The group whose policy applies: lowest priority value (ties: lowest id). */
export function activeGroupId(db: Database | Tx, deviceId: number): number | null {
  const row = db.get<{ id: number }>(
    "SELECT g.id FROM devices d JOIN group_devices gd ON gd.device_id = d.id JOIN groups g ON g.id = gd.group_id WHERE d.id = ? ORDER BY g.priority, g.id LIMIT 1",
    [deviceId],
  );
  return row?.id ?? null;
}

export function deviceExists(q: Queries, id: number): Promise<boolean>;
export function deviceExists(db: Database | Tx, id: number): boolean;
export function deviceExists(q: Queries | Database | Tx, id: number): Promise<boolean> | boolean {
  if (!(q instanceof Kysely)) return q.get("SELECT 1 AS x FROM devices WHERE id = ?", [id]) !== undefined;
  return q.selectFrom("devices").select("id").where("id", "=", id).executeTakeFirst().then((row) => row !== undefined);
}

export function deviceMac(q: Queries, id: number): Promise<string | undefined>;
export function deviceMac(db: Database | Tx, id: number): string | undefined;
export function deviceMac(db: Queries | Database | Tx, id: number): Promise<string | undefined> | string | undefined {
  if ("selectFrom" in db) return db.selectFrom("devices").select("mac_address").where("id", "=", id).executeTakeFirst().then((r) => r?.mac_address);
  return db.get<{ mac_address: string }>("SELECT mac_address FROM devices WHERE id = ?", [id])?.mac_address;
}

export function deviceIdByMac(q: Queries, mac: string): Promise<number | undefined>;
export function deviceIdByMac(db: Database | Tx, mac: string): number | undefined;
export function deviceIdByMac(db: Queries | Database | Tx, mac: string): Promise<number | undefined> | number | undefined {
  if ("selectFrom" in db) return db.selectFrom("devices").select("id").where("mac_address", "=", mac).executeTakeFirst().then((r) => r?.id);
  return db.get<{ id: number }>("SELECT id FROM devices WHERE mac_address = ?", [mac])?.id;
}

/** The MACs of the devices (alias `d`) a condition selects, e.g. a permission filter. */
export function deviceMacs(q: Queries, where: SqlFilter): Promise<Set<string>>;
export function deviceMacs(db: Pick<Database, "all">, where: SqlFilter): Set<string>;
export function deviceMacs(db: Queries | Pick<Database, "all">, where: SqlFilter): Promise<Set<string>> | Set<string> {
  if ("selectFrom" in db) {
    return sql<{ mac_address: string }>`SELECT d.mac_address FROM devices d WHERE ${sql.join(where.sql.split("?").flatMap((part, i) => (i === 0 ? [sql.raw(part)] : [sql`${where.params[i - 1]}`, sql.raw(part)])), sql.raw(""))}`
      .execute(db)
      .then(({ rows }) => new Set(rows.map((r) => r.mac_address)));
  }
  return new Set(db.all<{ mac_address: string }>(`SELECT d.mac_address FROM devices d WHERE ${where.sql}`, where.params).map((r) => r.mac_address));
}

/** Id, MAC and name of the devices `where` selects (all when absent), by name, at most `limit`. */
export function deviceNames(db: Database, where: SqlFilter | undefined, limit: number): Array<{ id: number; mac_address: string; name: string }> {
  return db.all<{ id: number; mac_address: string; name: string }>(
    `SELECT d.id, d.mac_address, d.name FROM devices d ${where ? `WHERE ${where.sql}` : ""} ORDER BY d.name, d.id LIMIT ?`,
    [...(where?.params ?? []), limit],
  );
}

/** Each tag of the devices `where` selects (all when absent), with how many of them carry it, by tag. */
export function tagCounts(db: Database, where: SqlFilter | undefined): Array<{ tag: string; n: number }> {
  return db.all<{ tag: string; n: number }>(
    `SELECT dt.tag, COUNT(*) AS n FROM device_tags dt JOIN devices d ON d.id = dt.device_id ${where ? `WHERE ${where.sql}` : ""} GROUP BY dt.tag ORDER BY dt.tag`,
    where?.params ?? [],
  );
}

/** The ids of the devices `where` selects that are not members of the group, in id order. */
export function deviceIdsOutsideGroup(db: Database, where: SqlFilter, groupId: number): number[] {
  return db
    .all<{ id: number }>(`SELECT d.id FROM devices d WHERE (${where.sql}) AND d.id NOT IN (SELECT device_id FROM group_devices WHERE group_id = ?) ORDER BY d.id`, [...where.params, groupId])
    .map((r) => r.id);
}

/** The devices of a group with their metadata column, in no particular order. */
export function groupMemberMetadata(q: Queries, groupId: number): Promise<Array<{ id: number; metadata: string }>>;
export function groupMemberMetadata(db: Database | Tx, groupId: number): Array<{ id: number; metadata: string }>;
export function groupMemberMetadata(db: Queries | Database | Tx, groupId: number): Promise<Array<{ id: number; metadata: string }>> | Array<{ id: number; metadata: string }> {
  if ("selectFrom" in db) return db.selectFrom("devices as d").innerJoin("group_devices as gd", "gd.device_id", "d.id").select(["d.id", "d.metadata"]).where("gd.group_id", "=", groupId).execute();
  return db.all<{ id: number; metadata: string }>("SELECT d.id, d.metadata FROM devices d JOIN group_devices gd ON gd.device_id = d.id WHERE gd.group_id = ?", [groupId]);
}

/** The devices that carry a tag, as a condition on `d` (for listDevices). */
export function taggedFilter(tag: string): SqlFilter {
  return { sql: "EXISTS (SELECT 1 FROM device_tags t WHERE t.device_id = d.id AND t.tag = ?)", params: [tag] };
}

/**
 * Per MAC of `macs` that names a device `readable` selects: whether `wanted` selects it too (both
 * conditions on `d`; the MACs go as one JSON parameter, so this is one query whatever their number).
 */
export function macsMatching(db: Database, macs: readonly string[], readable: SqlFilter, wanted: SqlFilter): Array<{ mac_address: string; w: number }> {
  return db.all<{ mac_address: string; w: number }>(
    `SELECT d.mac_address, ${wanted.sql} AS w FROM devices d WHERE d.mac_address IN (SELECT value FROM json_each(?)) AND ${readable.sql}`,
    [...wanted.params, JSON.stringify(macs), ...readable.params],
  );
}

/** The metadata column of a device as an object (a broken column reads as empty); undefined when there is no such device. */
export function deviceMetadataOf(tx: Database | Tx, id: number): Record<string, unknown> | undefined {
  const row = tx.get<{ metadata: string }>("SELECT metadata FROM devices WHERE id = ?", [id]);
  if (!row) return undefined;
  try {
    return JSON.parse(row.metadata) as Record<string, unknown>;
  } catch {
    return {};
  }
}

/** Replaces a device's metadata (already JSON text). */
export function setDeviceMetadata(tx: Tx, id: number, metadataText: string): void {
  tx.run("UPDATE devices SET metadata = ? WHERE id = ?", [metadataText, id]);
}

/** Replaces a device's capabilities (already JSON text). */
export function setDeviceCapabilities(tx: Tx, id: number, capabilitiesText: string): void {
  tx.run("UPDATE devices SET capabilities = ? WHERE id = ?", [capabilitiesText, id]);
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
export function insertDevice(tx: Tx, mac: string, device: ApprovedDevice & { created: string; tags: readonly string[] }): number {
  const { lastInsertRowid: id } = tx.run(
    "INSERT INTO devices (created, name, mac_address, public_key, key_fingerprint, capabilities, metadata, last_access) VALUES (?, ?, ?, ?, ?, '{}', ?, ?)",
    [device.created, device.name, mac, device.publicKey, device.fingerprint, device.metadataText, device.at],
  );
  for (const tag of device.tags) tx.run("INSERT OR IGNORE INTO device_tags (device_id, tag) VALUES (?, ?)", [id, tag]);
  return id;
}

/** Gives a known device an approved key, metadata and name. */
export function rekeyDevice(tx: Tx, id: number, device: ApprovedDevice): void {
  tx.run("UPDATE devices SET public_key = ?, key_fingerprint = ?, metadata = ?, name = ?, last_access = ? WHERE id = ?", [
    device.publicKey,
    device.fingerprint,
    device.metadataText,
    device.name,
    device.at,
    id,
  ]);
}

export function deviceTags(db: Database | Tx, deviceId: number): string[] {
  return db.all<{ tag: string }>("SELECT tag FROM device_tags WHERE device_id = ? ORDER BY tag", [deviceId]).map((r) => r.tag);
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

/** The v2 device object; `connected`: whether it holds a management socket now (ChannelHub.isConnected). */
export function toV2(db: Database, row: DeviceRow, connected: boolean): Device {
  return { ...baseShape(row), groups: deviceGroupIds(db, row.id), connected };
}

export function toV1(db: Database, row: DeviceRow): DeviceV1 {
  return { ...baseShape(row), group: activeGroupId(db, row.id) };
}

/**
 * Work other domains must do inside the deletion transaction of a device (e.g. records keyed by
 * MAC rather than by a foreign key). Rows that reference devices(id) ON DELETE CASCADE
 * (tags, group memberships, progress) need no hook. A hook may return work to do once the
 * deletion is on disk (closing a socket, removing files); the deletion answers after it.
 */
export type DeviceDeletionHook = (tx: Tx, device: DeviceRow) => void | (() => void | Promise<void>);
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
export async function deleteDevice(db: Database, hooks: DeviceHooks, id: number, actor: Actor): Promise<boolean> {
  const afterCommit: Array<() => void | Promise<void>> = [];
  const deleted = await db.write((tx) => {
    const device = getDevice(tx, id);
    if (!device) return false;
    for (const hook of hooks.deleted) {
      const after = hook(tx, device);
      if (after) afterCommit.push(after);
    }
    deletePermissionsOfInWrite(tx, "device", id);
    tx.run("DELETE FROM devices WHERE id = ?", [id]);
    recordAudit(tx, actor, "device.delete", `device:${id}`, { mac: device.mac_address, name: device.name });
    return true;
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
export async function addTag(db: Database, deviceId: number, tag: string, guard: ChangeGuardInWrite, actor: Actor): Promise<boolean> {
  if (!getDevice(db, deviceId)) return false;
  if (db.get("SELECT 1 AS x FROM device_tags WHERE device_id = ? AND tag = ?", [deviceId, tag])) return true;
  return db.write((tx) => {
    if (!getDevice(tx, deviceId)) return false;
    guard(tx, () => void tx.run("INSERT OR IGNORE INTO device_tags (device_id, tag) VALUES (?, ?)", [deviceId, tag]));
    recordAudit(tx, actor, "device.tag", `device:${deviceId}`, { add: tag });
    return true;
  });
}

/**
 * Renames a device (a management request; the device's own reports never rename it).
 * False when the device does not exist. `guard` runs the change: a name can grant permissions.
 */
export async function renameDevice(db: Database, deviceId: number, name: string, guard: ChangeGuardInWrite, actor: Actor): Promise<boolean> {
  return db.write((tx) => {
    const device = getDevice(tx, deviceId);
    if (!device) return false;
    guard(tx, () => void tx.run("UPDATE devices SET name = ? WHERE id = ?", [name, deviceId]));
    recordAudit(tx, actor, "device.rename", `device:${deviceId}`, { from: device.name, to: name });
    return true;
  });
}

/** Removes a tag (absent: no-op). False when the device does not exist. */
export async function removeTag(db: Database, deviceId: number, tag: string, actor: Actor): Promise<boolean> {
  if (!getDevice(db, deviceId)) return false;
  await db.write((tx) => {
    if (tx.run("DELETE FROM device_tags WHERE device_id = ? AND tag = ?", [deviceId, tag]).changes > 0) recordAudit(tx, actor, "device.tag", `device:${deviceId}`, { remove: tag });
  });
  return true;
}

/** Tags as given by a device in its metadata: a list, or one string with one tag per line or comma. */
export function tagsFromMetadata(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const items = Array.isArray(value) ? value : value.split(/[\n,]/);
  return [...new Set(items.map((t) => t.trim()).filter(validTag))];
}

/**
 * The devices of a group whose agents require signed updates (they report the fingerprints of
 * their verify_keys as `<prefix>.update.verify_keys`), with their device type and those keys.
 */
export function signatureRequirements(db: Database | Tx, groupId: number, prefix: string): Array<{ id: number; devtype: string; keys: string[] }> {
  const rows = db.all<{ id: number; metadata: string }>(
    "SELECT d.id, d.metadata FROM devices d JOIN group_devices gd ON gd.device_id = d.id WHERE gd.group_id = ? AND json_extract(d.metadata, ?) IS NOT NULL ORDER BY d.id",
    [groupId, `$."${prefix}.update.verify_keys"`],
  );
  return rows.flatMap((row) => {
    const metadata = JSON.parse(row.metadata) as Record<string, unknown>;
    const listed = metadata[`${prefix}.update.verify_keys`];
    const keys = (Array.isArray(listed) ? listed : [listed]).filter((k): k is string => typeof k === "string" && k !== "");
    return keys.length === 0 ? [] : [{ id: row.id, devtype: String(metadata[`${prefix}.hardware.devtype`] ?? ""), keys }];
  });
}

/** The software versions devices of `devtype` run now (what update_server.deltas auto makes deltas from). */
export function versionsRunning(db: Database | Tx, prefix: string, devtype: string): string[] {
  return db
    .all<{ version: unknown }>("SELECT DISTINCT json_extract(metadata, ?) AS version FROM devices WHERE json_extract(metadata, ?) = ?", [`$."${prefix}.software.version"`, `$."${prefix}.hardware.devtype"`, devtype])
    .map((row) => row.version)
    .filter((v): v is string => typeof v === "string" && v !== "");
}

/** Replaces a device's reported metadata (what another protocol's inventory or update check reports). */
export async function replaceDeviceMetadata(db: Database, deviceId: number, metadata: Metadata): Promise<void> {
  const text = JSON.stringify(metadata);
  if (getDevice(db, deviceId)?.metadata === text) return;
  await db.write((tx) => void tx.run("UPDATE devices SET metadata = ? WHERE id = ?", [text, deviceId]));
}
