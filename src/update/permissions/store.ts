import type { Database } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import * as z from "zod";
import { LabgateError } from "../../util/errors.ts";
import { strictBody } from "../validation.ts";
import { readInteger } from "../../http/openapi.ts";
import { rfc822 } from "../../util/time.ts";
import { PERMISSIONS, RESOURCES, resourceExists, type Permission, type PermissionResource } from "./permissions.ts";

interface PermissionRow {
  id: number;
  created: string;
  user_id: string;
  resource: string;
  resource_id: number | null;
  resource_name: string | null;
  permission: string;
}

export interface PermissionObject {
  id: number;
  created: string;
  resource: string;
  resource_id: number | null;
  resource_name: string | null;
  user_id: string;
  permission: string;
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

export interface NewPermission {
  user_id: string;
  resource: PermissionResource;
  resource_id: number | null;
  resource_name: string | null;
  permission: Permission;
}


const positiveOrNull = (id: unknown): number | null => (typeof id === "number" && id !== 0 ? id : null);

const required = (key: string) =>
  z
    .string({ error: `schema validation failed: field "${key}" is required (a non-empty string)` })
    .min(1, { error: `schema validation failed: field "${key}" is required (a non-empty string)` });

/**
 * The body of POST /api/v1/permissions: required strings, known resource
 * and permission words, a positive resource_id or a resource_name (0, "" and null count as
 * missing, as in the reference; an id may come as its decimal text, as the reference reads it). `id` and `created` are accepted and ignored. The checks run in
 * the order the hand-written ones did, so the first failure names the same field.
 */
export const permissionBody = strictBody({
  // Words and lengths are checked below, after every required field, as the hand-written checks did;
  // the document shows them.
  resource: required("resource").meta({ enum: [...RESOURCES] }),
  user_id: required("user_id").meta({ maxLength: 256 }),
  permission: required("permission").meta({ enum: [...PERMISSIONS] }),
  resource_id: z.unknown().optional().meta({ type: ["integer", "string", "null"], minimum: 0 }),
  resource_name: z.unknown().optional().meta({ type: ["string", "null"], maxLength: 256 }),
  id: z.unknown().optional(),
  created: z.unknown().optional(),
}).superRefine((body, ctx) => {
  const fail = (why: string) => ctx.addIssue({ code: "custom", message: `schema validation failed: ${why}` });
  const { resource, permission, resource_name: rawName } = body;
  const rawId = readInteger(body.resource_id);
  if (body.user_id.length > 256) return fail(`field "user_id" is longer than 256 characters`);
  if (!(RESOURCES as readonly string[]).includes(resource)) return fail(`unknown resource "${resource}" (expected one of ${RESOURCES.join(", ")})`);
  if (!(PERMISSIONS as readonly string[]).includes(permission)) return fail(`unknown permission "${permission}" (expected one of ${PERMISSIONS.join(", ")})`);
  const hasId = rawId !== undefined && rawId !== null && rawId !== 0;
  const hasName = rawName !== undefined && rawName !== null && rawName !== "";
  if (hasId && (typeof rawId !== "number" || !Number.isSafeInteger(rawId) || rawId < 1)) return fail(`field "resource_id" must be a positive integer`);
  if (hasName && (typeof rawName !== "string" || rawName.length > 256)) return fail(`field "resource_name" must be a string of at most 256 characters`);
  if (!hasId && !hasName) return fail(`one of "resource_id" or "resource_name" is required`);
  })
  .transform(
    (b): NewPermission => ({
      user_id: b.user_id,
      resource: b.resource as PermissionResource,
      permission: b.permission as Permission,
      resource_id: positiveOrNull(readInteger(b.resource_id)),
      resource_name: typeof b.resource_name === "string" && b.resource_name !== "" ? b.resource_name : null,
    }),
  );

/** The rules between fields: `shell` only on devices, names only for device_by_tag and device_by_tag only by name. */
export function checkPermission(p: NewPermission): NewPermission {
  const { resource, permission } = p;
  const hasId = p.resource_id !== null;
  const hasName = p.resource_name !== null;
  if (permission === "shell" && resource !== "device" && resource !== "device_by_tag") {
    throw new LabgateError("unprocessable", "Shell permission is only applicable to devices");
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
      now.toISOString(),
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
