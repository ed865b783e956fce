/*
 * The permission rules for the code of other areas that is still synchronous (`db.write`
 * transactions: a deployment's package assignment, a device's tags and name, an account's deletion;
 * and synchronous reads: the lab's views, the channel's checks): the same conditions
 * (permissions.ts) as the embedded engine's SQL text. This file goes once that code is the Store's.
 */
import type { Database, Tx as SyncTx } from "../../db/index.ts";
import { embeddedSql } from "../../db/dialect.ts";
import type { Identity } from "../../app/context.ts";
import { enabledScopesOf } from "../../accounts/accounts.ts";
import { LabgateError } from "../../util/errors.ts";
import { appliesTo, grantBeyond, MSG_FORBIDDEN, notFoundMessage, permissionFilter, type ObjectRef, type Resource } from "./permissions.ts";
import type { Permission } from "./schema.ts";

const TABLES: Record<Resource, string> = { package: "packages", group: "groups", device: "devices" };

/** allowed (permissions.ts) on the synchronous database or inside its transaction. */
export function allowedSync(db: Pick<Database, "get">, identity: Identity, resource: Resource, id: number, perm: Permission): boolean {
  const filter = permissionFilter(identity, resource, "o", perm);
  if (!filter) return true;
  const cond = embeddedSql(filter);
  return db.get(`SELECT 1 AS ok FROM ${TABLES[resource]} o WHERE o.id = ? AND ${cond.sql}`, [id, ...cond.params]) !== undefined;
}

/** authorize (permissions.ts) on the synchronous database or inside its transaction. */
export function authorizeSync(db: Pick<Database, "get">, identity: Identity, resource: Resource, id: number, perm: Permission): void {
  if (allowedSync(db, identity, resource, id, perm)) return;
  if (perm === "read") throw new LabgateError("not_found", notFoundMessage(resource));
  throw new LabgateError("forbidden", MSG_FORBIDDEN);
}

/** hasPermissionRows (permissions.ts) on the synchronous database. */
export const hasPermissionRowsSync = (db: Pick<Database, "get">, user: string): boolean => db.get("SELECT 1 AS x FROM permissions WHERE user_id = ? LIMIT 1", [user]) !== undefined;

function holders(tx: SyncTx, resource: Resource, id: number): Set<string> {
  const on = embeddedSql(appliesTo(resource, "o"));
  const rows = tx.all<{ user_id: string; permission: string }>(`SELECT DISTINCT p.user_id, p.permission FROM ${TABLES[resource]} o JOIN permissions p ON (${on.sql}) WHERE o.id = ?`, [...on.params, id]);
  return new Set(rows.map((r) => `${r.user_id}\n${r.permission}`));
}

/** withinGrants (permissions.ts) inside a synchronous transaction. */
export function withinGrantsInWrite<T>(tx: SyncTx, identity: Identity, objects: readonly ObjectRef[], apply: () => T): T {
  if (identity.kind === "mgmt" && identity.scopes.has("admin_rw")) return apply();
  const before = objects.map((o) => holders(tx, o.resource, o.id));
  const result = apply();
  const scoped = (user: string, perm: Permission) => {
    const scopes = new Set(enabledScopesOf(tx, user)?.split(" ") ?? []);
    return scopes.has("admin_rw") || (perm === "read" && scopes.has("admin_ro"));
  };
  objects.forEach((o, i) => {
    const perm = grantBeyond(identity, before[i], holders(tx, o.resource, o.id), scoped);
    if (perm) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: the change would grant ${perm} on ${o.resource} ${o.id}, which you do not hold`);
  });
  return result;
}

/** ChangeGuard (permissions.ts) of a synchronous transaction. */
export type ChangeGuardInWrite = (tx: SyncTx, apply: () => void) => void;

export const unguardedInWrite: ChangeGuardInWrite = (_tx, apply) => apply();

export const grantGuardInWrite =
  (identity: Identity, objects: readonly ObjectRef[]): ChangeGuardInWrite =>
  (tx, apply) =>
    withinGrantsInWrite(tx, identity, objects, apply);

/** deletePermissionsOf (permissions.ts) inside a synchronous transaction. */
export function deletePermissionsOfInWrite(tx: SyncTx, resource: Resource, id: number): void {
  tx.run("DELETE FROM permissions WHERE resource = ? AND resource_id = ?", [resource, id]);
}

/** deletePermissionsOfUser (permissions.ts) inside a synchronous transaction. */
export function deletePermissionsOfUserInWrite(tx: SyncTx, user: string): void {
  tx.run("DELETE FROM permissions WHERE lower(user_id) = lower(?)", [user]);
}
