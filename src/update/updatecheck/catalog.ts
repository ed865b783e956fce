import type { Database } from "../../db/index.ts";
import { rfc822 } from "../../util/time.ts";
import { catalogGeneration } from "../groups/groups.ts";
import { policyTarget } from "../groups/policy.ts";
import type { Meta } from "./resolver.ts";

/** What an update check needs of a package, ready to answer with. */
export interface CatalogPackage {
  id: number;
  created: string;
  sha256: string;
  storageName: string;
  version: string;
  metadata: Meta;
}

export interface GroupPlan {
  target: string | undefined;
  /** Ascending package id: the resolver's tie-break (6.3). */
  packages: CatalogPackage[];
  metas: Meta[];
}

interface Cache {
  generation: number;
  activeGroup: Map<number, number | null>;
  plans: Map<number, GroupPlan>;
}

const caches = new WeakMap<Database, Cache>();
const MAX_ENTRIES = 100_000;

/**
 * The resolver's inputs kept in memory (update checks are the hot path): each device's active
 * group and each group's policy target and packages. Everything is dropped whenever a group
 * write bumps the catalog generation. Device deletion needs no invalidation: ids are never
 * reused and a deleted device's token is refused before it gets here; packages cannot change
 * while assigned and new ones are in no group yet.
 */
function cacheOf(db: Database): Cache {
  const generation = catalogGeneration(db);
  let cache = caches.get(db);
  if (!cache || cache.generation !== generation || cache.activeGroup.size > MAX_ENTRIES) {
    cache = { generation, activeGroup: new Map(), plans: new Map() };
    caches.set(db, cache);
  }
  return cache;
}

/** The group whose policy applies to a device: lowest priority value, ties to the lowest id. */
export function activeGroup(db: Database, deviceId: number): number | null {
  const cache = cacheOf(db);
  let id = cache.activeGroup.get(deviceId);
  if (id === undefined) {
    const row = db.get<{ id: number }>(
      "SELECT g.id FROM group_devices gd JOIN groups g ON g.id = gd.group_id WHERE gd.device_id = ? ORDER BY g.priority, g.id LIMIT 1",
      [deviceId],
    );
    id = row?.id ?? null;
    cache.activeGroup.set(deviceId, id);
  }
  return id;
}

export function groupPlan(db: Database, groupId: number, versionKey: string): GroupPlan | undefined {
  const cache = cacheOf(db);
  let plan = cache.plans.get(groupId);
  if (!plan) {
    const group = db.get<{ policy: string }>("SELECT policy FROM groups WHERE id = ?", [groupId]);
    if (!group) return undefined;
    const rows = db.all<{ id: number; created: string; sha256: string; storage_name: string; metadata: string }>(
      "SELECT p.id, p.created, p.sha256, p.storage_name, p.metadata FROM group_packages gp JOIN packages p ON p.id = gp.package_id WHERE gp.group_id = ? ORDER BY p.id",
      [groupId],
    );
    const packages = rows.map((row) => {
      const metadata = JSON.parse(row.metadata) as Meta;
      return { id: row.id, created: rfc822(new Date(row.created)), sha256: row.sha256, storageName: row.storage_name, version: String(metadata[versionKey] ?? ""), metadata };
    });
    plan = { target: policyTarget(group.policy), packages, metas: packages.map((p) => p.metadata) };
    cache.plans.set(groupId, plan);
  }
  return plan;
}
