/*
 * The group functions of the code of other areas that is still synchronous (a deployment's
 * creation and completion in their `db.write`s; the test targets' and event streams' reads): the
 * same rules and queries as groups.ts. This file goes once that code is the Store's.
 */
import type { Database, Tx as SyncTx } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { MSG_FORBIDDEN, type SqlFilter } from "../permissions/permissions.ts";
import type { GroupRow } from "./groups.ts";
import { allowedSync, withinGrantsInWrite } from "../permissions/legacy.ts";
import { packageExistsInWrite } from "../packages/legacy.ts";

export const groupExistsInWrite = (tx: SyncTx, id: number): boolean => tx.get("SELECT 1 AS x FROM groups WHERE id = ?", [id]) !== undefined;

export const groupPolicyInWrite = (tx: SyncTx, groupId: number): string | undefined => tx.get<{ policy: string }>("SELECT policy FROM groups WHERE id = ?", [groupId])?.policy;

export const setPolicyInWrite = (tx: SyncTx, groupId: number, policy: string): void => void tx.run("UPDATE groups SET policy = ? WHERE id = ?", [policy, groupId]);

export const groupDeviceIdsInWrite = (tx: SyncTx, groupId: number): number[] =>
  tx.all<{ device_id: number }>("SELECT device_id FROM group_devices WHERE group_id = ? ORDER BY device_id", [groupId]).map((r) => r.device_id);

export const groupPackageIdsInWrite = (tx: SyncTx, groupId: number): number[] =>
  tx.all<{ package_id: number }>("SELECT package_id FROM group_packages WHERE group_id = ? ORDER BY package_id", [groupId]).map((r) => r.package_id);

/** assignPackages (groups.ts) inside a synchronous transaction. */
export function assignPackagesInWrite(tx: SyncTx, identity: Identity, groupId: number, packageIds: number[], how: "replace" | "add", actor: Actor): number[] {
  const current = groupPackageIdsInWrite(tx, groupId);
  const had = new Set(current);
  const wanted = [...new Set(packageIds)];
  const added = wanted.filter((id) => !had.has(id));
  for (const id of added) if (!allowedSync(tx, identity, "package", id, "update")) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: package ${id}`);
  for (const id of added) if (!packageExistsInWrite(tx, id)) throw new LabgateError("not_found", `package ${id} does not exist`);
  const removed = how === "replace" ? current.filter((id) => !wanted.includes(id)) : [];
  withinGrantsInWrite(tx, identity, added.map((id) => ({ resource: "package" as const, id })), () => {
    for (const id of removed) tx.run("DELETE FROM group_packages WHERE group_id = ? AND package_id = ?", [groupId, id]);
    for (const id of added) tx.run("INSERT INTO group_packages (group_id, package_id) VALUES (?, ?)", [groupId, id]);
  });
  const after = groupPackageIdsInWrite(tx, groupId);
  recordAudit(tx, actor, "group.packages", `group:${groupId}`, { packages: after });
  return after;
}

/** listGroups (groups.ts) on the synchronous database. */
export function listGroupsSync(db: Pick<Database, "all">, where?: SqlFilter): GroupRow[] {
  return db.all<GroupRow>(`SELECT g.id, g.created, g.metadata, g.policy, g.priority, g.created_by FROM groups g${where ? ` WHERE ${where.sql}` : ""} ORDER BY g.id`, where?.params ?? []);
}

/** groupIdsMatching (groups.ts) on the synchronous database. */
export function groupIdsMatchingSync(db: Pick<Database, "all">, where: SqlFilter): number[] {
  return db.all<{ id: number }>(`SELECT g.id FROM groups g WHERE ${where.sql}`, where.params).map((r) => r.id);
}

/** groupMemberCounts (groups.ts) on the synchronous database. */
export function groupMemberCountsSync(db: Pick<Database, "all">, devices: SqlFilter | undefined, groups: SqlFilter | undefined): Array<{ metadata: string; n: number }> {
  return db.all<{ metadata: string; n: number }>(
    `SELECT g.metadata, COUNT(*) AS n FROM groups g JOIN group_devices gd ON gd.group_id = g.id JOIN devices d ON d.id = gd.device_id
       WHERE ${devices ? devices.sql : "1"} AND ${groups ? groups.sql : "1"} GROUP BY g.id ORDER BY g.id`,
    [...(devices?.params ?? []), ...(groups?.params ?? [])],
  );
}
