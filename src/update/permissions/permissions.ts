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
import type { Database, Tx } from "../../db/index.ts";
import type { Tx as StoreTx } from "../../db/store.ts";
import type { Identity } from "../../app/context.ts";
import { enabledScopesOf } from "../../accounts/accounts.ts";
import { LabgateError } from "../../util/errors.ts";

import type { Permission, PermissionResource } from "./schema.ts";
import { isoTime } from "../../util/time.ts";
/** Resources that objects (and routes) have; device_by_tag only names devices. */
export type Resource = Exclude<PermissionResource, "device_by_tag">;


const TABLES: Record<Resource, string> = { package: "packages", group: "groups", device: "devices" };

/** What admin scopes let through without looking at the table. */
export function bypasses(identity: Identity, perm: Permission): boolean {
  if (identity.kind !== "mgmt") return false;
  if (identity.scopes.has("admin_rw")) return true;
  return perm === "read" && identity.scopes.has("admin_ro");
}

export interface SqlFilter {
  sql: string;
  params: (string | number)[];
}

/** SQL condition on a permission row `p`: it applies to the row of `resource` with table alias `alias`. */
function appliesTo(resource: Resource, alias: string): string {
  const id = `${alias}.id`;
  if (resource === "group") return `(p.resource = 'group' AND p.resource_id = ${id})`;
  if (resource === "package") {
    return (
      `(p.resource = 'package' AND p.resource_id = ${id})` +
      ` OR (p.resource = 'group' AND p.resource_id IN (SELECT gp.group_id FROM group_packages gp WHERE gp.package_id = ${id}))`
    );
  }
  return (
    `(p.resource = 'device' AND p.resource_id = ${id})` +
    ` OR (p.resource = 'group' AND p.resource_id IN (SELECT gd.group_id FROM group_devices gd WHERE gd.device_id = ${id}))` +
    ` OR (p.resource = 'device_by_tag' AND (p.resource_name = ${alias}.name OR p.resource_name = ${alias}.mac_address` +
    ` OR p.resource_name IN (SELECT dt.tag FROM device_tags dt WHERE dt.device_id = ${id})))`
  );
}

/**
 * SQL condition that is true for rows of `resource` (table alias `alias`) on which `user` has
 * `perm`, ignoring admin scopes.
 */
function grantCondition(resource: Resource, alias: string, user: string, perm: Permission): SqlFilter {
  return { sql: `EXISTS (SELECT 1 FROM permissions p WHERE p.user_id = ? AND p.permission = ? AND (${appliesTo(resource, alias)}))`, params: [user, perm] };
}

/**
 * Condition for a list query over `resource` (table alias `alias`): the rows `identity` may
 * see with `perm` (default read). Undefined means no filter (admin bypass).
 * Usage: `SELECT ... FROM devices d WHERE ${f.sql}` with `f.params`.
 */
export function permissionFilter(identity: Identity, resource: Resource, alias: string, perm: Permission = "read"): SqlFilter | undefined {
  if (bypasses(identity, perm)) return undefined;
  if (identity.kind !== "mgmt") return { sql: "0", params: [] };
  return grantCondition(resource, alias, identity.user, perm);
}

/** The permission test itself (no admin bypass): does `user` hold `perm` on that object? */
export function has(db: Database | Tx, user: string, resource: Resource, id: number, perm: Permission): boolean {
  const cond = grantCondition(resource, "o", user, perm);
  return db.get(`SELECT 1 AS ok FROM ${TABLES[resource]} o WHERE o.id = ? AND ${cond.sql}`, [id, ...cond.params]) !== undefined;
}

export const MSG_FORBIDDEN = "insufficient permission to a resource";
export const notFoundMessage = (resource: Resource): string => `${resource} does not exist`;

/**
 * Throws unless `identity` may do `perm` on the object: a hidden object is a 404 (with the same
 * message as a missing one), a write without permission a 403. Admins always pass; the handler
 * then answers 404 itself for a missing object. Call it before the handler acts.
 */
export function authorize(db: Database | Tx, identity: Identity, resource: Resource, id: number, perm: Permission): void {
  if (bypasses(identity, perm)) return;
  if (identity.kind === "mgmt" && has(db, identity.user, resource, id, perm)) return;
  if (perm === "read") throw new LabgateError("not_found", notFoundMessage(resource));
  throw new LabgateError("forbidden", MSG_FORBIDDEN);
}

/** True when `identity` may do `perm` on the object (no exception; e.g. to filter in code). */
export function allowed(db: Database | Tx, identity: Identity, resource: Resource, id: number, perm: Permission): boolean {
  return bypasses(identity, perm) || (identity.kind === "mgmt" && has(db, identity.user, resource, id, perm));
}

/**
 * The automatic grants: the management user who created a group or uploaded a package
 * gets read, update and delete on it. Call inside the creating transaction.
 */
/** Whether any permission row names the user (without one, a user without admin scopes sees nothing). */
export function hasPermissionRows(db: Database | Tx, user: string): boolean {
  return db.get("SELECT 1 AS x FROM permissions WHERE user_id = ? LIMIT 1", [user]) !== undefined;
}

/** A deleted account's per-user permission rows go (deleteAccount's `dropPermissions`). */
export async function deletePermissionsOfUser(tx: StoreTx, user: string): Promise<void> {
  await tx.deleteFrom("permissions").where((eb) => eb(eb.fn("lower", ["user_id"]), "=", eb.fn("lower", [eb.val(user)]))).execute();
}

export function grantCreator(tx: Tx, identity: Identity, resource: Resource, id: number, now: Date): void {
  if (identity.kind !== "mgmt") return;
  for (const perm of ["read", "update", "delete"] as const) {
    tx.run(
      "INSERT OR IGNORE INTO permissions (created, user_id, resource, resource_id, resource_name, permission) VALUES (?, ?, ?, ?, NULL, ?)",
      [isoTime(now), identity.user, resource, id, perm],
    );
  }
}

/** Cascade: deleting an object deletes its id-based permission rows (named rows stay). */
export function deletePermissionsOf(tx: Tx, resource: Resource, id: number): void {
  tx.run("DELETE FROM permissions WHERE resource = ? AND resource_id = ?", [resource, id]);
}

/** Does the object exist (used to validate permission rows)? */
export function resourceExists(db: Database | Tx, resource: Resource, id: number): boolean {
  return db.get(`SELECT 1 AS ok FROM ${TABLES[resource]} WHERE id = ?`, [id]) !== undefined;
}

/** Who holds what on one object: "user\npermission" for every grant that reaches it (admin scopes aside). */
function holders(tx: Tx, resource: Resource, id: number): Set<string> {
  const rows = tx.all<{ user_id: string; permission: string }>(
    `SELECT DISTINCT p.user_id, p.permission FROM ${TABLES[resource]} o JOIN permissions p ON (${appliesTo(resource, "o")}) WHERE o.id = ?`,
    [id],
  );
  return new Set(rows.map((r) => `${r.user_id}\n${r.permission}`));
}

/**
 * Whether `user` is an enabled console account whose scopes already give `perm` everywhere (like
 * bypasses): rows that reach it gain it nothing. A group an admin created carries the admin's
 * creator rows; without this, no one but an admin could add anything to it.
 */
function accountBypasses(tx: Tx, user: string, perm: Permission): boolean {
  const scopes = new Set(enabledScopesOf(tx, user)?.split(" ") ?? []);
  return scopes.has("admin_rw") || (perm === "read" && scopes.has("admin_ro"));
}

export interface ObjectRef {
  resource: "device" | "package";
  id: number;
}

/**
 * THE rule against escalation through tags, groups and names: a change to an object's
 * tags, groups or name may not grant anyone a permission on it that the caller does not already
 * hold on it (svc_admin_rw passes; svc_admin_ro holds read). Runs `apply` (the change) inside the
 * caller's write transaction between a look at the object's grants before and after; a change
 * that would grant more throws 403 and the transaction rolls back, so nothing changes.
 * Every route that changes tags, group membership or a name goes through this function.
 */
export function withinGrants<T>(tx: Tx, identity: Identity, objects: readonly ObjectRef[], apply: () => T): T {
  if (identity.kind === "mgmt" && identity.scopes.has("admin_rw")) return apply();
  const before = objects.map((o) => holders(tx, o.resource, o.id));
  const result = apply();
  objects.forEach((o, i) => {
    for (const grant of holders(tx, o.resource, o.id)) {
      if (before[i].has(grant)) continue;
      const cut = grant.lastIndexOf("\n");
      const perm = grant.slice(cut + 1) as Permission;
      if (accountBypasses(tx, grant.slice(0, cut), perm)) continue; // they had it already, by scope
      const callerHeld = bypasses(identity, perm) || (identity.kind === "mgmt" && before[i].has(`${identity.user}\n${perm}`));
      if (!callerHeld) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: the change would grant ${perm} on ${o.resource} ${o.id}, which you do not hold`);
    }
  });
  return result;
}

/** Runs a change inside a write transaction; a domain function that changes tags, groups or names takes one. */
export type ChangeGuard = (tx: Tx, apply: () => void) => void;

/** No rule (admin-only routes, approval). */
export const unguarded: ChangeGuard = (_tx, apply) => apply();

/** The ChangeGuard of `identity` changing `objects` (see withinGrants). */
export const grantGuard =
  (identity: Identity, objects: readonly ObjectRef[]): ChangeGuard =>
  (tx, apply) =>
    withinGrants(tx, identity, objects, apply);
