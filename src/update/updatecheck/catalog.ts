import type { Database } from "../../db/index.ts";
import { rfc822 } from "../../util/time.ts";
import { groupPolicy, membershipsByPriority, packagesOfGroup, type CatalogWatch } from "../groups/groups.ts";
import { policyTarget } from "../groups/policy.ts";
import { REQUIRES, resolve, type Meta, type ResolverKeys } from "./resolver.ts";

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
  /** Ascending package id: the resolver's tie-break. */
  packages: CatalogPackage[];
  metas: Meta[];
  /** Device metadata keys the packages' `requires:` clauses look at. */
  requiredKeys: string[];
  /** Resolver answers by the device metadata that can matter (version, devtype, required keys). */
  answers: Map<string, number | undefined>;
}

interface Cache {
  /** The database's load epoch: a reload from disk (after a failed write) drops the cache too. */
  epoch: number;
  /** Device id -> active group id; devices in no group are absent. Loaded in one query. */
  activeGroup: Map<number, number>;
  plans: Map<number, GroupPlan>;
}

/**
 * The resolver's inputs kept in memory (update checks are the hot path): each device's active
 * group and each group's policy target and packages. One per server (the update domain's);
 * every group write that changes what a check could answer drops it (`changed`, called by
 * groups/groups.ts). Device deletion needs no invalidation: ids are never reused and a deleted
 * device's token is refused before it gets here; packages cannot change while assigned and new
 * ones are in no group yet.
 */
export class UpdateCatalog implements CatalogWatch {
  private cache: Cache | undefined;
  private readonly db: Database;

  constructor(db: Database) {
    this.db = db;
  }

  changed(): void {
    this.cache = undefined;
  }

  private current(): Cache {
    if (!this.cache || this.cache.epoch !== this.db.epoch) {
      // One pass over all memberships, ordered so that each device's first row is its active group.
      const activeGroup = new Map<number, number>();
      for (const row of membershipsByPriority(this.db)) if (!activeGroup.has(row.device_id)) activeGroup.set(row.device_id, row.group_id);
      this.cache = { epoch: this.db.epoch, activeGroup, plans: new Map() };
    }
    return this.cache;
  }

  /** The group whose policy applies to a device: lowest priority value, ties to the lowest id. */
  activeGroup(deviceId: number): number | null {
    return this.current().activeGroup.get(deviceId) ?? null;
  }

  groupPlan(groupId: number, versionKey: string): GroupPlan | undefined {
    const cache = this.current();
    let plan = cache.plans.get(groupId);
    if (!plan) {
      const policy = groupPolicy(this.db, groupId);
      if (policy === undefined) return undefined;
      const packages = packagesOfGroup(this.db, groupId).map((row) => {
        const metadata = JSON.parse(row.metadata) as Meta;
        return { id: row.id, created: rfc822(new Date(row.created)), sha256: row.sha256, storageName: row.storage_name, version: String(metadata[versionKey] ?? ""), metadata };
      });
      const requiredKeys = [...new Set(packages.flatMap((p) => Object.keys(p.metadata).filter((k) => k.startsWith(REQUIRES)).map((k) => k.slice(REQUIRES.length))))];
      plan = { target: policyTarget(policy), packages, metas: packages.map((p) => p.metadata), requiredKeys, answers: new Map() };
      cache.plans.set(groupId, plan);
    }
    return plan;
  }
}

const retargeted = new WeakMap<GroupPlan, Map<string, GroupPlan>>();

/**
 * The plan of a group with another target (a deployment's): the same packages, its own memo of
 * answers. Kept as long as the group's plan is (a catalog change makes both anew).
 */
export function retarget(plan: GroupPlan, target: string): GroupPlan {
  if (plan.target === target) return plan;
  let byTarget = retargeted.get(plan);
  if (!byTarget) retargeted.set(plan, (byTarget = new Map()));
  let other = byTarget.get(target);
  if (!other) byTarget.set(target, (other = { ...plan, target, answers: new Map() }));
  return other;
}

const MAX_ANSWERS = 10_000;

/**
 * The resolver's answer for a device under a plan, memoised on exactly the device metadata the
 * resolver reads (many devices share a version), so a steady stream of checks rarely walks the graph.
 */
export function resolveInPlan(plan: GroupPlan, device: Meta, keys: ResolverKeys): number | undefined {
  const relevant = [device[keys.version], device[keys.devtype], ...plan.requiredKeys.map((k) => device[k])];
  const key = JSON.stringify(relevant);
  if (plan.answers.has(key)) return plan.answers.get(key);
  const answer = resolve(device, plan.metas, plan.target, keys);
  if (plan.answers.size >= MAX_ANSWERS) plan.answers.clear();
  plan.answers.set(key, answer);
  return answer;
}
