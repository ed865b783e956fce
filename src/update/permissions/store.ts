import type { Selectable } from "kysely";
import type { Queries, Store } from "../../db/store.ts";
import type { PermissionsTable } from "../../db/schema.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { LabgateError } from "../../util/errors.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { resourceExists } from "./permissions.ts";
import type { NewPermission, Permission, PermissionObject, PermissionResource } from "./schema.ts";

type PermissionRow = Selectable<PermissionsTable>;

const toObject = (row: PermissionRow): PermissionObject => ({
  id: row.id,
  created: rfc822(new Date(row.created)),
  resource: row.resource as PermissionResource,
  resource_id: row.resource_id,
  resource_name: row.resource_name,
  user_id: row.user_id,
  permission: row.permission as Permission,
});

const COLUMNS = ["id", "created", "user_id", "resource", "resource_id", "resource_name", "permission"] as const;


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
export async function createPermission(store: Store, p: NewPermission, now: Date, actor: Actor): Promise<PermissionObject> {
  const id = await store.transact(async (tx) => {
    if (p.resource !== "device_by_tag" && !(await resourceExists(tx, p.resource, p.resource_id as number))) {
      throw new LabgateError("not_found", `${p.resource} ${p.resource_id} does not exist`);
    }
    const duplicate = await tx
      .selectFrom("permissions")
      .select("id")
      .where("user_id", "=", p.user_id)
      .where("resource", "=", p.resource)
      .where("permission", "=", p.permission)
      .where((eb) => (p.resource_id !== null ? eb("resource_id", "=", p.resource_id) : eb("resource_name", "=", p.resource_name)))
      .executeTakeFirst();
    if (duplicate) throw new LabgateError("conflict", "Conflict while adding a permission");
    const { id } = await tx
      .insertInto("permissions")
      .values({ created: isoTime(now), user_id: p.user_id, resource: p.resource, resource_id: p.resource_id, resource_name: p.resource_name, permission: p.permission })
      .returning("id")
      .executeTakeFirstOrThrow();
    await recordAudit(tx, actor, "permission.create", `permission:${id}`, { ...p });
    return id;
  });
  return (await getPermission(store.query, id))!;
}

export async function getPermission(q: Queries, id: number): Promise<PermissionObject | undefined> {
  const row = await q.selectFrom("permissions").select(COLUMNS).where("id", "=", id).executeTakeFirst();
  return row && toObject(row);
}

/** All rows, or only those of `user`. */
export async function listPermissions(q: Queries, user?: string): Promise<PermissionObject[]> {
  const rows = await q
    .selectFrom("permissions")
    .select(COLUMNS)
    .$if(user !== undefined, (qb) => qb.where("user_id", "=", user!))
    .orderBy("id")
    .execute();
  return rows.map(toObject);
}

export async function deletePermission(store: Store, id: number, actor: Actor): Promise<boolean> {
  return store.transact(async (tx) => {
    const row = await tx.selectFrom("permissions").select(COLUMNS).where("id", "=", id).executeTakeFirst();
    if (!row) return false;
    await tx.deleteFrom("permissions").where("id", "=", id).execute();
    await recordAudit(tx, actor, "permission.delete", `permission:${id}`, { user_id: row.user_id, resource: row.resource, resource_id: row.resource_id, resource_name: row.resource_name, permission: row.permission });
    return true;
  });
}
