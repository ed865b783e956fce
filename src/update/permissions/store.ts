import type { Database } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { LabgateError } from "../../util/errors.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { resourceExists } from "./permissions.ts";
import type { NewPermission, Permission, PermissionObject, PermissionResource } from "./schema.ts";

interface PermissionRow {
  id: number;
  created: string;
  user_id: string;
  resource: PermissionResource;
  resource_id: number | null;
  resource_name: string | null;
  permission: Permission;
}

const toObject = (row: PermissionRow): PermissionObject => ({
  id: row.id,
  created: rfc822(new Date(row.created)),
  resource: row.resource,
  resource_id: row.resource_id,
  resource_name: row.resource_name,
  user_id: row.user_id,
  permission: row.permission,
});

const COLUMNS = "id, created, user_id, resource, resource_id, resource_name, permission";


/** The rules between fields: `shell` and `power` only on devices, names only for device_by_tag and device_by_tag only by name. */
export function checkPermission(p: NewPermission): NewPermission {
  const { resource, permission } = p;
  const hasId = p.resource_id !== null;
  const hasName = p.resource_name !== null;
  if (permission === "shell" && resource !== "device" && resource !== "device_by_tag") {
    throw new LabgateError("unprocessable", "Shell permission is only applicable to devices");
  }
  if (permission === "power" && resource !== "device" && resource !== "device_by_tag") {
    throw new LabgateError("unprocessable", "Power permission is only applicable to devices");
  }
  if (hasName && resource !== "device_by_tag") throw new LabgateError("unprocessable", "Named permissions are only applicable to the device_by_tag resource type");
  if (resource === "device_by_tag" && (hasId || !hasName)) {
    throw new LabgateError("unprocessable", "device_by_tag permissions name a tag or device name: give resource_name, not resource_id");
  }
  return p;
}

/** Stores a validated permission: 404 for an unknown object, 409 for a duplicate. */
export async function createPermission(db: Database, p: NewPermission, now: Date, actor: Actor): Promise<PermissionObject> {
  const id = await db.write((tx) => {
    if (p.resource !== "device_by_tag" && !resourceExists(tx, p.resource, p.resource_id as number)) {
      throw new LabgateError("not_found", `${p.resource} ${p.resource_id} does not exist`);
    }
    const duplicate = tx.get(
      "SELECT 1 AS x FROM permissions WHERE user_id = ? AND resource = ? AND permission = ? AND coalesce(resource_id, resource_name) = ?",
      [p.user_id, p.resource, p.permission, p.resource_id ?? p.resource_name],
    );
    if (duplicate) throw new LabgateError("conflict", "Conflict while adding a permission");
    const id = tx.run("INSERT INTO permissions (created, user_id, resource, resource_id, resource_name, permission) VALUES (?, ?, ?, ?, ?, ?)", [
      isoTime(now),
      p.user_id,
      p.resource,
      p.resource_id,
      p.resource_name,
      p.permission,
    ]).lastInsertRowid;
    recordAudit(tx, actor, "permission.create", `permission:${id}`, { ...p });
    return id;
  });
  return getPermission(db, id)!;
}

export function getPermission(db: Database, id: number): PermissionObject | undefined {
  const row = db.get<PermissionRow>(`SELECT ${COLUMNS} FROM permissions WHERE id = ?`, [id]);
  return row && toObject(row);
}

/** All rows, or only those of `user`. */
export function listPermissions(db: Database, user?: string): PermissionObject[] {
  const rows =
    user === undefined
      ? db.all<PermissionRow>(`SELECT ${COLUMNS} FROM permissions ORDER BY id`)
      : db.all<PermissionRow>(`SELECT ${COLUMNS} FROM permissions WHERE user_id = ? ORDER BY id`, [user]);
  return rows.map(toObject);
}

export async function deletePermission(db: Database, id: number, actor: Actor): Promise<boolean> {
  return db.write((tx) => {
    const row = tx.get<PermissionRow>(`SELECT ${COLUMNS} FROM permissions WHERE id = ?`, [id]);
    if (!row) return false;
    tx.run("DELETE FROM permissions WHERE id = ?", [id]);
    recordAudit(tx, actor, "permission.delete", `permission:${id}`, { user_id: row.user_id, resource: row.resource, resource_id: row.resource_id, resource_name: row.resource_name, permission: row.permission });
    return true;
  });
}
