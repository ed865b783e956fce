import type { AppContext, Identity } from "../../app/context.ts";
import { groupsHoldingPackage } from "../groups/groups.ts";
import { groupNameOf } from "../groups/name.ts";
import { packageKeys, readablePackage } from "../packages/packages.ts";
import type { PackageUsage } from "../packages/schema.ts";
import { permissionFilter } from "../permissions/permissions.ts";
import { deploymentsOfVersion } from "./store.ts";

/**
 * Where a package the caller may read is used: the groups the caller may read that have it, and
 * the deployments to them of the package's version, newest first, at most 100. It lives here, above
 * packages and groups, because it joins all three.
 */
export async function packageUsage({ store }: Pick<AppContext, "store">, identity: Identity, id: number, prefix: string): Promise<PackageUsage> {
  const row = await readablePackage(store.query, identity, id);
  const found = await groupsHoldingPackage(store.query, row.id, permissionFilter(identity, "group", "g"));
  const version = (JSON.parse(row.metadata) as Record<string, unknown>)[packageKeys(prefix).version];
  const deployments = found.length === 0 || typeof version !== "string" ? [] : await deploymentsOfVersion(store.query, version, found.map((g) => g.id), 100);
  return { groups: found.map((g) => ({ id: g.id, name: groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) ?? null })), deployments };
}
