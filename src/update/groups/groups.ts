import type { Database, Tx } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { groupNameOf } from "./name.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { LabgateError } from "../../util/errors.ts";
import { DEFAULT_POLICY } from "./policy.ts";
import { allowed, MSG_FORBIDDEN, unguarded, withinGrants, type ChangeGuard, type SqlFilter } from "../permissions/permissions.ts";
import type { Identity } from "../../app/context.ts";
import type { Group, GroupV1 } from "./schema.ts";
import { countDevices, deviceExists, deviceIdsOutsideGroup } from "../devices/devices.ts";
import { packageExists } from "../packages/packages.ts";

export const DEFAULT_PRIORITY = 25;

/** A group row as stored. */
export interface GroupRow {
  id: number;
  created: string;
  metadata: string;
  policy: string;
  priority: number;
  created_by: string | null;
}

const COLUMNS = "g.id, g.created, g.metadata, g.policy, g.priority, g.created_by";

export function getGroup(db: Database | Tx, id: number): GroupRow | undefined {
  return db.get<GroupRow>(`SELECT ${COLUMNS} FROM groups g WHERE g.id = ?`, [id]);
}

/** Groups (alias `g`), optionally narrowed by a condition such as a permission filter. */
export function listGroups(db: Database, where?: { sql: string; params: (string | number)[] }): GroupRow[] {
  return db.all<GroupRow>(`SELECT ${COLUMNS} FROM groups g${where ? ` WHERE ${where.sql}` : ""} ORDER BY g.id`, where?.params ?? []);
}

/** Every membership, each device's rows in the order its groups apply (priority, then id): its first is its active group. */
export function membershipsByPriority(db: Database | Tx): Array<{ device_id: number; group_id: number }> {
  return db.all<{ device_id: number; group_id: number }>("SELECT gd.device_id, gd.group_id FROM group_devices gd JOIN groups g ON g.id = gd.group_id ORDER BY gd.device_id, g.priority, g.id");
}

/** A group's policy column, or undefined when there is no such group. */
export function groupPolicy(db: Database | Tx, groupId: number): string | undefined {
  return db.get<{ policy: string }>("SELECT policy FROM groups WHERE id = ?", [groupId])?.policy;
}

/** Sets a group's policy column in `tx` (the caller tells the catalog: `changed`). */
export function setPolicyIn(tx: Tx, groupId: number, policy: string): void {
  tx.run("UPDATE groups SET policy = ? WHERE id = ?", [policy, groupId]);
}

/** The package rows a group holds, by package id. */
export function packagesOfGroup(db: Database | Tx, groupId: number): Array<{ id: number; created: string; sha256: string; storage_name: string; metadata: string }> {
  return db.all<{ id: number; created: string; sha256: string; storage_name: string; metadata: string }>(
    "SELECT p.id, p.created, p.sha256, p.storage_name, p.metadata FROM group_packages gp JOIN packages p ON p.id = gp.package_id WHERE gp.group_id = ? ORDER BY p.id",
    [groupId],
  );
}

/** The devices that are members of a group, as a condition on `d`. */
export function memberFilter(groupId: number): SqlFilter {
  return { sql: "d.id IN (SELECT gd.device_id FROM group_devices gd WHERE gd.group_id = ?)", params: [groupId] };
}

/** The groups (those `visible` lets through, alias `g`) that hold a package, by id. */
export function groupsHoldingPackage(db: Database, packageId: number, visible: SqlFilter | undefined): Array<{ id: number; metadata: string }> {
  return db.all<{ id: number; metadata: string }>(
    `SELECT g.id, g.metadata FROM groups g JOIN group_packages gp ON gp.group_id = g.id WHERE gp.package_id = ?${visible ? ` AND ${visible.sql}` : ""} ORDER BY g.id`,
    [packageId, ...(visible?.params ?? [])],
  );
}

/** The ids of the groups (alias `g`) a condition selects, e.g. a permission filter. */
export function groupIdsMatching(db: Database, where: SqlFilter): number[] {
  return db.all<{ id: number }>(`SELECT g.id FROM groups g WHERE ${where.sql}`, where.params).map((r) => r.id);
}

export const groupDeviceIds = (db: Database | Tx, groupId: number): number[] =>
  db.all<{ device_id: number }>("SELECT device_id FROM group_devices WHERE group_id = ? ORDER BY device_id", [groupId]).map((r) => r.device_id);

export const groupPackageIds = (db: Database | Tx, groupId: number): number[] =>
  db.all<{ package_id: number }>("SELECT package_id FROM group_packages WHERE group_id = ? ORDER BY package_id", [groupId]).map((r) => r.package_id);

export function toV2(db: Database, row: GroupRow): Group {
  return { ...toV1(db, row), priority: row.priority };
}

export function toV1(db: Database, row: GroupRow): GroupV1 {
  return {
    id: row.id,
    created: rfc822(new Date(row.created)),
    packages: groupPackageIds(db, row.id),
    devices: groupDeviceIds(db, row.id),
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    policy: row.policy,
  };
}

/**
 * Told of every write that changes what an update check could answer (memberships, policies,
 * priorities, assignments): the update domain's catalog (updatecheck/catalog.ts). `changed` tells
 * it right after the transaction ran in memory, before the commit is awaited, so no check can
 * cache stale inputs.
 */
export interface CatalogWatch {
  changed(): void;
}
/** Wraps a write that changes the catalog (here and in deployments/): `changed(catalog, db.write(...))`. */
export function changed<T>(catalog: CatalogWatch, write: Promise<T>): Promise<T> {
  catalog.changed();
  return write;
}

export interface NewGroup {
  metadata: Record<string, unknown>;
  /** The metadata prefix: the audit log names the group by `<prefix>.group.name` (name.ts). */
  prefix: string;
  priority?: number;
  createdBy: string | null;
  /** Runs inside the insert transaction (creator grants). */
  onCreated?: (tx: Tx, id: number) => void;
}

export async function createGroup(db: Database, input: NewGroup, now: Date, actor: Actor): Promise<GroupRow> {
  return db.write((tx) => {
    const { lastInsertRowid: id } = tx.run("INSERT INTO groups (created, metadata, policy, priority, created_by) VALUES (?, ?, ?, ?, ?)", [
      isoTime(now),
      JSON.stringify(input.metadata),
      DEFAULT_POLICY,
      input.priority ?? DEFAULT_PRIORITY,
      input.createdBy,
    ]);
    input.onCreated?.(tx, id);
    const name = groupNameOf(input.metadata, input.prefix);
    recordAudit(tx, actor, "group.create", `group:${id}`, { ...(name !== undefined ? { name } : {}), priority: input.priority ?? DEFAULT_PRIORITY });
    return getGroup(tx, id)!;
  });
}

export const GROUP_NOT_FOUND = "group does not exist";

/** A group without devices can be deleted; its package assignments and permission rows go with it. */
export async function deleteGroup(db: Database, catalog: CatalogWatch, id: number, actor: Actor, onDelete?: (tx: Tx) => void): Promise<void> {
  return changed(catalog, db.write((tx) => {
    if (!getGroup(tx, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    if (tx.get("SELECT 1 AS x FROM group_devices WHERE group_id = ? LIMIT 1", [id])) throw new LabgateError("conflict", "group is still assigned to some devices");
    onDelete?.(tx);
    tx.run("DELETE FROM group_packages WHERE group_id = ?", [id]);
    tx.run("DELETE FROM groups WHERE id = ?", [id]);
    recordAudit(tx, actor, "group.delete", `group:${id}`);
  }));
}

/**
 * v2: a device may not hold two groups of the same priority (the target included).
 * v1: a device may hold at most one group.
 */
export type MembershipRule = "priority" | "single";

/**
 * PATCH devices: atomic; additions are evaluated first, then removals; an
 * unknown device, an addition that breaks the membership rule, or the removal of a device that
 * is not (after the additions) in the group makes the whole request a 409 and changes nothing.
 * `guard` runs the change (membership grants the group's permissions, see permissions.ts).
 */
export async function patchGroupDevices(
  db: Database,
  catalog: CatalogWatch,
  groupId: number,
  add: number[],
  remove: number[],
  rule: MembershipRule,
  actor: Actor,
  guard: ChangeGuard = unguarded,
): Promise<void> {
  return changed(catalog, db.write((tx) => {
    const group = getGroup(tx, groupId);
    if (!group) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const members = new Set(groupDeviceIds(tx, groupId));
    for (const deviceId of add) {
      if (!deviceExists(tx, deviceId)) throw new LabgateError("conflict", `conflict while assigning device, device ${deviceId} does not exist`);
      const clash =
        rule === "single"
          ? tx.get("SELECT 1 AS x FROM group_devices WHERE device_id = ? LIMIT 1", [deviceId])
          : tx.get("SELECT 1 AS x FROM group_devices gd JOIN groups g ON g.id = gd.group_id WHERE gd.device_id = ? AND g.priority = ? LIMIT 1", [
              deviceId,
              group.priority,
            ]);
      if (clash) {
        throw new LabgateError(
          "conflict",
          rule === "single"
            ? `device ${deviceId} is already assigned to a group`
            : "A group with the same priority is already assigned to one of the devices requested to be added",
        );
      }
      members.add(deviceId);
    }
    for (const deviceId of remove) {
      if (!members.has(deviceId)) throw new LabgateError("conflict", `device ${deviceId} is not assigned to this group`);
    }
    guard(tx, () => {
      for (const deviceId of add) tx.run("INSERT INTO group_devices (group_id, device_id) VALUES (?, ?)", [groupId, deviceId]);
      for (const deviceId of remove) tx.run("DELETE FROM group_devices WHERE group_id = ? AND device_id = ?", [groupId, deviceId]);
    });
    recordAudit(tx, actor, "group.devices", `group:${groupId}`, { add, remove });
  }));
}

/**
 * Each group `groups` selects (alias `g`, all when absent) with how many of its members `devices`
 * selects (alias `d`, all when absent), by group id; groups without such members are left out.
 */
export function groupMemberCounts(db: Database, devices: SqlFilter | undefined, groups: SqlFilter | undefined): Array<{ metadata: string; n: number }> {
  return db.all<{ metadata: string; n: number }>(
    `SELECT g.metadata, COUNT(*) AS n FROM groups g JOIN group_devices gd ON gd.group_id = g.id JOIN devices d ON d.id = gd.device_id
       WHERE ${devices ? devices.sql : "1"} AND ${groups ? groups.sql : "1"} GROUP BY g.id ORDER BY g.id`,
    [...(devices?.params ?? []), ...(groups?.params ?? [])],
  );
}

/**
 * The devices `where` matches that are not members of the group yet, for an "add all matching";
 * 400 when more than `max` match (a filter that wide is a mistake more often than not).
 */
export function matchingNonMembers(db: Database, groupId: number, where: { sql: string; params: (string | number)[] }, max: number): number[] {
  const total = countDevices(db, where);
  if (total > max) throw new LabgateError("invalid", `${total} devices match: at most ${max} are added at once; narrow the filter`);
  return deviceIdsOutsideGroup(db, where, groupId);
}

/**
 * THE package assignment of a group, whichever route asks (the group's package route, a
 * deployment's `packages`), inside the caller's transaction: `packageIds` become the group's
 * packages (`replace`) or join them (`add`). Group permissions reach the group's packages, so each
 * package newly assigned needs `update` on it (403 naming it, before anything says whether it
 * exists: then 404) and may grant none of the group's holders a permission the caller does not
 * hold on it (withinGrants: 403). Audited as `group.packages`. Returns the group's packages after.
 */
export function assignPackages(tx: Tx, identity: Identity, groupId: number, packageIds: number[], how: "replace" | "add", actor: Actor): number[] {
  const current = groupPackageIds(tx, groupId);
  const had = new Set(current);
  const wanted = [...new Set(packageIds)];
  const added = wanted.filter((id) => !had.has(id));
  for (const id of added) if (!allowed(tx, identity, "package", id, "update")) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: package ${id}`);
  for (const id of added) if (!packageExists(tx, id)) throw new LabgateError("not_found", `package ${id} does not exist`);
  const removed = how === "replace" ? current.filter((id) => !wanted.includes(id)) : [];
  withinGrants(tx, identity, added.map((id) => ({ resource: "package" as const, id })), () => {
    for (const id of removed) tx.run("DELETE FROM group_packages WHERE group_id = ? AND package_id = ?", [groupId, id]);
    for (const id of added) tx.run("INSERT INTO group_packages (group_id, package_id) VALUES (?, ?)", [groupId, id]);
  });
  const after = groupPackageIds(tx, groupId);
  recordAudit(tx, actor, "group.packages", `group:${groupId}`, { packages: after });
  return after;
}

/** The group's package route: the set becomes exactly `packageIds` (assignPackages). */
export async function setGroupPackages(db: Database, catalog: CatalogWatch, groupId: number, packageIds: number[], identity: Identity, actor: Actor): Promise<void> {
  try {
    return await changed(catalog, db.write((tx) => {
      if (!getGroup(tx, groupId)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
      assignPackages(tx, identity, groupId, packageIds, "replace", actor);
    }));
  } catch (error) {
    // Only a constraint firing after the checks above (a concurrent change) lands here.
    if (!(error instanceof LabgateError) && /constraint/i.test((error as Error).message)) throw new LabgateError("conflict", "conflict while assigning package, the package or group changed during the operation");
    throw error;
  }
}

export async function setGroupPolicy(db: Database, catalog: CatalogWatch, groupId: number, policy: string, actor: Actor): Promise<void> {
  return changed(catalog, db.write((tx) => {
    const group = getGroup(tx, groupId);
    if (!group) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    tx.run("UPDATE groups SET policy = ? WHERE id = ?", [policy, groupId]);
    recordAudit(tx, actor, "group.policy", `group:${groupId}`, { from: group.policy, to: policy });
  }));
}

/** Priority change: 409 when a device of this group holds another group with that priority. */
export async function setGroupPriority(db: Database, catalog: CatalogWatch, groupId: number, priority: number, actor: Actor): Promise<void> {
  return changed(catalog, db.write((tx) => {
    if (!getGroup(tx, groupId)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const clash = tx.get(
      `SELECT 1 AS x FROM group_devices mine
         JOIN group_devices other ON other.device_id = mine.device_id AND other.group_id <> mine.group_id
         JOIN groups g ON g.id = other.group_id
       WHERE mine.group_id = ? AND g.priority = ? LIMIT 1`,
      [groupId, priority],
    );
    if (clash) throw new LabgateError("conflict", "A group with the same priority is already assigned to one of the devices in this group");
    tx.run("UPDATE groups SET priority = ? WHERE id = ?", [priority, groupId]);
    recordAudit(tx, actor, "group.priority", `group:${groupId}`, { priority });
  }));
}
