import type { Database, Tx } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { rfc822 } from "../../util/time.ts";
import { deletePermissionsOf, type ChangeGuard, type SqlFilter } from "../permissions/permissions.ts";
import { metaKeys, type Metadata } from "../registration/metadata.ts";
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
  return db.all<{ group_id: number }>("SELECT group_id FROM group_devices WHERE device_id = ? ORDER BY group_id", [deviceId]).map((r) => r.group_id);
}

/** The group whose policy applies: lowest priority value (ties: lowest id). */
export function activeGroupId(db: Database | Tx, deviceId: number): number | null {
  const row = db.get<{ id: number }>(
    "SELECT g.id FROM group_devices gd JOIN groups g ON g.id = gd.group_id WHERE gd.device_id = ? ORDER BY g.priority, g.id LIMIT 1",
    [deviceId],
  );
  return row?.id ?? null;
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
 * memberships (cascade), its `device` permission rows, its pending registrations, and whatever
 * hooks other domains registered. Its tokens are refused from then on (deviceGate: the row is
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
    deletePermissionsOf(tx, "device", id);
    tx.run("DELETE FROM registrations WHERE mac_address = ?", [device.mac_address]);
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
export async function addTag(db: Database, deviceId: number, tag: string, guard: ChangeGuard, actor: Actor): Promise<boolean> {
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
export async function renameDevice(db: Database, deviceId: number, name: string, guard: ChangeGuard, actor: Actor): Promise<boolean> {
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

/** Replaces a device's reported metadata (what another protocol's inventory or update check reports). */
export async function setDeviceMetadata(db: Database, deviceId: number, metadata: Metadata): Promise<void> {
  const text = JSON.stringify(metadata);
  if (getDevice(db, deviceId)?.metadata === text) return;
  await db.write((tx) => void tx.run("UPDATE devices SET metadata = ? WHERE id = ?", [text, deviceId]));
}
