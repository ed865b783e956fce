import type { Cluster } from "../../cluster/cluster.ts";
import type { Store } from "../../db/store.ts";
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
  /** The store's load epoch: a reload from disk (after a failed write) drops the cache too. */
  epoch: number;
  /** The catalog's count of changes when the load began: a change since makes it stale. */
  generation: number;
  /** Device id -> active group id; devices in no group are absent. Loaded in one query. */
  activeGroup: Map<number, number>;
  /** Each group's plan, or its load under way (concurrent checks of a group share one). */
  plans: Map<number, Promise<GroupPlan | undefined>>;
}

/**
 * The resolver's inputs kept in memory (update checks are the hot path): each device's active
 * group and each group's policy target and packages. One per server (the update domain's);
 * every group write that changes what a check could answer drops it (`changed`, called by
 * groups/groups.ts before and after the write), and what a load began to read before a change is
 * not kept. Device deletion needs no invalidation: ids are never reused and a deleted device's
 * token is refused before it gets here; packages cannot change while assigned and new ones are in
 * no group yet.
 */
export class UpdateCatalog implements CatalogWatch {
  private cache: Cache | undefined;
  private loading: Promise<Cache> | undefined;
  private generation = 0;
  private readonly store: Store;
  private readonly cluster: Pick<Cluster, "publish" | "on"> | undefined;

  /** With `cluster`, a change on any node drops every node's catalog (`catalog_changed`, sent with each `changed`). */
  constructor(store: Store, cluster?: Pick<Cluster, "publish" | "on">) {
    this.store = store;
    this.cluster = cluster;
    cluster?.on("catalog_changed", () => this.drop());
  }

  changed(): void {
    this.drop();
    this.cluster?.publish("catalog_changed");
  }

  private drop(): void {
    this.generation++;
    this.cache = undefined;
    this.loading = undefined;
  }

  private current(): Cache | Promise<Cache> {
    if (this.cache && this.cache.epoch === this.store.epoch) return this.cache;
    return (this.loading ??= this.load());
  }

  private async load(): Promise<Cache> {
    const generation = this.generation;
    const epoch = this.store.epoch;
    let rows;
    try {
      rows = await membershipsByPriority(this.store.query);
    } finally {
      // Done or failed, this load is over: a check that finds no cache (a failure's) starts another.
      if (generation === this.generation) this.loading = undefined;
    }
    // One pass over all memberships, ordered so that each device's first row is its active group.
    const activeGroup = new Map<number, number>();
    for (const row of rows) if (!activeGroup.has(row.device_id)) activeGroup.set(row.device_id, row.group_id);
    const cache: Cache = { epoch, generation, activeGroup, plans: new Map() };
    if (generation === this.generation) this.cache = cache;
    return cache;
  }

  /** The group whose policy applies to a device: lowest priority value, ties to the lowest id. */
  async activeGroup(deviceId: number): Promise<number | null> {
    return (await this.current()).activeGroup.get(deviceId) ?? null;
  }

  async groupPlan(groupId: number, versionKey: string): Promise<GroupPlan | undefined> {
    const cache = await this.current();
    let plan = cache.plans.get(groupId);
    if (!plan) {
      plan = this.loadPlan(groupId, versionKey);
      cache.plans.set(groupId, plan);
      // A failed load is not kept: the next check tries again.
      plan.catch(() => cache.plans.get(groupId) === plan && cache.plans.delete(groupId));
    }
    return plan;
  }

  private async loadPlan(groupId: number, versionKey: string): Promise<GroupPlan | undefined> {
    const [policy, rows] = await Promise.all([groupPolicy(this.store.query, groupId), packagesOfGroup(this.store.query, groupId)]);
    if (policy === undefined) return undefined;
    const packages = rows.map((row) => {
      const metadata = JSON.parse(row.metadata) as Meta;
      return { id: row.id, created: rfc822(new Date(row.created)), sha256: row.sha256, storageName: row.storage_name, version: String(metadata[versionKey] ?? ""), metadata };
    });
    const requiredKeys = [...new Set(packages.flatMap((p) => Object.keys(p.metadata).filter((k) => k.startsWith(REQUIRES)).map((k) => k.slice(REQUIRES.length))))];
    return { target: policyTarget(policy), packages, metas: packages.map((p) => p.metadata), requiredKeys, answers: new Map() };
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
