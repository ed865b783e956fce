/*
 * Per-user permissions: the ONE authorization function of the
 * update server. Every route that touches a package, group or device calls `authorize` (single
 * object, before acting) or `permissionFilter` (lists, in the query).
 *
 * Tables this module reads (migrations 003 and 004):
 *   permissions(id, created, user_id, resource, resource_id, resource_name, permission)
 *   devices(id, name, mac_address), device_tags(device_id, tag)
 *   groups(id), group_devices(group_id, device_id), group_packages(group_id, package_id), packages(id)
 *
 * Permission test has(user, resource, id, perm), true when any of:
 *   1. a direct row (user, resource, id, perm);
 *   2. package: (user, group, G, perm) for a group G the package is assigned to;
 *   3. device: (user, group, G, perm) for a group G the device is in;
 *   4. device: a device_by_tag row with perm whose resource_name is one of the device's tags,
 *      its name or its MAC address.
 * Admin bypass: svc_admin_rw passes every check; svc_admin_ro passes every read check.
 * Denied read: 404 (the object is hidden, indistinguishable from a missing one).
 * Denied write (update, delete, shell, test, power): 403. `test`: run test configs on the device (src/testrun/devices/);
 * `power`: switch the board's power port (src/lab/).
 */
import { sql, type Expression, type RawBuilder, type SqlBool } from "kysely";
import type { Queries, Tx } from "../../db/store.ts";
import type { Identity } from "../../app/context.ts";
import { enabledScopesOf } from "../../accounts/accounts.ts";
import { LabgateError } from "../../util/errors.ts";

import type { Permission, PermissionResource } from "./schema.ts";
import { isoTime } from "../../util/time.ts";
/** Resources that objects (and routes) have; device_by_tag only names devices. */
export type Resource = Exclude<PermissionResource, "device_by_tag">;

const TABLES = { package: "packages", group: "groups", device: "devices" } as const satisfies Record<Resource, string>;

/** What admin scopes let through without looking at the table. */
export function bypasses(identity: Identity, perm: Permission): boolean {
  if (identity.kind !== "mgmt") return false;
  if (identity.scopes.has("admin_rw")) return true;
  return perm === "read" && identity.scopes.has("admin_ro");
}

/** Condition on a permission row `p`: it applies to the row of `resource` with table alias `alias`. */
export function appliesTo(resource: Resource, alias: string): RawBuilder<SqlBool> {
  const id = sql.ref(`${alias}.id`);
  if (resource === "group") return sql<SqlBool>`(p.resource = 'group' AND p.resource_id = ${id})`;
  if (resource === "package") {
    return sql<SqlBool>`(p.resource = 'package' AND p.resource_id = ${id}) OR (p.resource = 'group' AND p.resource_id IN (SELECT gp.group_id FROM group_packages gp WHERE gp.package_id = ${id}))`;
  }
  return sql<SqlBool>`(p.resource = 'device' AND p.resource_id = ${id})
    OR (p.resource = 'group' AND p.resource_id IN (SELECT gd.group_id FROM group_devices gd WHERE gd.device_id = ${id}))
    OR (p.resource = 'device_by_tag' AND (p.resource_name = ${sql.ref(`${alias}.name`)} OR p.resource_name = ${sql.ref(`${alias}.mac_address`)}
      OR p.resource_name IN (SELECT dt.tag FROM device_tags dt WHERE dt.device_id = ${id})))`;
}

/**
 * Condition that is true for rows of `resource` (table alias `alias`) on which `user` has
 * `perm`, ignoring admin scopes.
 */
function grantCondition(resource: Resource, alias: string, user: string, perm: Permission): RawBuilder<SqlBool> {
  return sql<SqlBool>`EXISTS (SELECT 1 FROM permissions p WHERE p.user_id = ${user} AND p.permission = ${perm} AND (${appliesTo(resource, alias)}))`;
}

/** No row: what a caller without a management identity may see. */
const NONE = sql<SqlBool>`1 = 0`;

/**
 * Condition for a list query over `resource` (table alias `alias`): the rows `identity` may
 * see with `perm` (default read). Undefined means no filter (admin bypass).
 * Usage: `q.selectFrom("devices as d")...$if(f !== undefined, (qb) => qb.where(f!))`.
 */
export function permissionFilter(identity: Identity, resource: Resource, alias: string, perm: Permission = "read"): Expression<SqlBool> | undefined {
  if (bypasses(identity, perm)) return undefined;
  if (identity.kind !== "mgmt") return NONE;
  return grantCondition(resource, alias, identity.user, perm);
}

/** The permission test itself (no admin bypass): does `user` hold `perm` on that object? */
export async function has(q: Queries, user: string, resource: Resource, id: number, perm: Permission): Promise<boolean> {
  const { rows } = await sql<{ ok: number }>`SELECT 1 AS ok FROM ${sql.table(TABLES[resource])} o WHERE o.id = ${id} AND ${grantCondition(resource, "o", user, perm)}`.execute(q);
  return rows.length > 0;
}

export const MSG_FORBIDDEN = "insufficient permission to a resource";
export const notFoundMessage = (resource: Resource): string => `${resource} does not exist`;

/**
 * Throws unless `identity` may do `perm` on the object: a hidden object is a 404 (with the same
 * message as a missing one), a write without permission a 403. Admins always pass; the handler
 * then answers 404 itself for a missing object. Call it before the handler acts.
 */
export async function authorize(q: Queries, identity: Identity, resource: Resource, id: number, perm: Permission): Promise<void> {
  if (await allowed(q, identity, resource, id, perm)) return;
  if (perm === "read") throw new LabgateError("not_found", notFoundMessage(resource));
  throw new LabgateError("forbidden", MSG_FORBIDDEN);
}

/** True when `identity` may do `perm` on the object (no exception; e.g. to filter in code). */
export async function allowed(q: Queries, identity: Identity, resource: Resource, id: number, perm: Permission): Promise<boolean> {
  return bypasses(identity, perm) || (identity.kind === "mgmt" && (await has(q, identity.user, resource, id, perm)));
}

/** Whether any permission row names the user (without one, a user without admin scopes sees nothing). */
export async function hasPermissionRows(q: Queries, user: string): Promise<boolean> {
  return (await q.selectFrom("permissions").select("id").where("user_id", "=", user).limit(1).executeTakeFirst()) !== undefined;
}

/** A deleted account's per-user permission rows go (deleteAccount's `dropPermissions`); account names ignore case. */
export async function deletePermissionsOfUser(tx: Tx, user: string): Promise<void> {
  await tx
    .deleteFrom("permissions")
    .where((eb) => eb(eb.fn("lower", ["user_id"]), "=", eb.fn("lower", [eb.val(user)])))
    .execute();
}

/**
 * The automatic grants: the management user who created a group or uploaded a package
 * gets read, update and delete on it. Call inside the creating transaction.
 */
export async function grantCreator(tx: Tx, identity: Identity, resource: Resource, id: number, now: Date): Promise<void> {
  if (identity.kind !== "mgmt") return;
  const created = isoTime(now);
  await tx
    .insertInto("permissions")
    .values((["read", "update", "delete"] as const).map((permission) => ({ created, user_id: identity.user, resource, resource_id: id, resource_name: null, permission })))
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** Cascade: deleting an object deletes its id-based permission rows (named rows stay). */
export async function deletePermissionsOf(tx: Tx, resource: Resource, id: number): Promise<void> {
  await tx.deleteFrom("permissions").where("resource", "=", resource).where("resource_id", "=", id).execute();
}

/** Does the object exist (used to validate permission rows)? */
export async function resourceExists(q: Queries, resource: Resource, id: number): Promise<boolean> {
  const { rows } = await sql<{ ok: number }>`SELECT 1 AS ok FROM ${sql.table(TABLES[resource])} WHERE id = ${id}`.execute(q);
  return rows.length > 0;
}

/** Who holds what on one object: "user\npermission" for every grant that reaches it (admin scopes aside). */
async function holders(tx: Tx, resource: Resource, id: number): Promise<Set<string>> {
  const { rows } = await sql<{ user_id: string; permission: string }>`SELECT DISTINCT p.user_id, p.permission FROM ${sql.table(TABLES[resource])} o JOIN permissions p ON (${appliesTo(resource, "o")}) WHERE o.id = ${id}`.execute(tx);
  return new Set(rows.map((r) => `${r.user_id}\n${r.permission}`));
}

/**
 * Whether `user` is an enabled console account whose scopes already give `perm` everywhere (like
 * bypasses): rows that reach it gain it nothing. A group an admin created carries the admin's
 * creator rows; without this, no one but an admin could add anything to it.
 */
async function accountBypasses(tx: Tx, user: string, perm: Permission): Promise<boolean> {
  const scopes = new Set((await enabledScopesOf(tx, user))?.split(" ") ?? []);
  return scopes.has("admin_rw") || (perm === "read" && scopes.has("admin_ro"));
}

export interface ObjectRef {
  resource: "device" | "package";
  id: number;
}

/** The grant (`user\npermission`) of `after` that the caller may not give, or undefined when there is none. */
export function grantBeyond(identity: Identity, before: ReadonlySet<string>, after: ReadonlySet<string>, scopedAlready: (user: string, perm: Permission) => boolean): Permission | undefined {
  for (const grant of after) {
    if (before.has(grant)) continue;
    const cut = grant.lastIndexOf("\n");
    const perm = grant.slice(cut + 1) as Permission;
    if (scopedAlready(grant.slice(0, cut), perm)) continue; // they had it already, by scope
    const callerHeld = bypasses(identity, perm) || (identity.kind === "mgmt" && before.has(`${identity.user}\n${perm}`));
    if (!callerHeld) return perm;
  }
  return undefined;
}

/**
 * THE rule against escalation through tags, groups and names: a change to an object's
 * tags, groups or name may not grant anyone a permission on it that the caller does not already
 * hold on it (svc_admin_rw passes; svc_admin_ro holds read). Runs `apply` (the change) inside the
 * caller's transaction between a look at the object's grants before and after; a change
 * that would grant more throws 403 and the transaction rolls back, so nothing changes.
 * Every route that changes tags, group membership or a name goes through this function.
 */
export async function withinGrants<T>(tx: Tx, identity: Identity, objects: readonly ObjectRef[], apply: () => Promise<T>): Promise<T> {
  if (identity.kind === "mgmt" && identity.scopes.has("admin_rw")) return apply();
  const before: Set<string>[] = [];
  for (const o of objects) before.push(await holders(tx, o.resource, o.id));
  const result = await apply();
  for (const [i, o] of objects.entries()) {
    const after = await holders(tx, o.resource, o.id);
    const scoped = new Map<string, boolean>();
    for (const grant of after) {
      if (before[i].has(grant)) continue;
      const cut = grant.lastIndexOf("\n");
      const user = grant.slice(0, cut);
      const perm = grant.slice(cut + 1) as Permission;
      scoped.set(grant, await accountBypasses(tx, user, perm));
    }
    const perm = grantBeyond(identity, before[i], after, (user, p) => scoped.get(`${user}\n${p}`) ?? false);
    if (perm) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: the change would grant ${perm} on ${o.resource} ${o.id}, which you do not hold`);
  }
  return result;
}

/** Runs a change inside a transaction; a domain function that changes tags, groups or names takes one. */
export type ChangeGuard = (tx: Tx, apply: () => Promise<void>) => Promise<void>;

/** No rule (admin-only routes, approval). */
export const unguarded: ChangeGuard = (_tx, apply) => apply();

/** The ChangeGuard of `identity` changing `objects` (see withinGrants). */
export const grantGuard =
  (identity: Identity, objects: readonly ObjectRef[]): ChangeGuard =>
  (tx, apply) =>
    withinGrants(tx, identity, objects, apply);
