import { sql, type Expression, type Selectable, type SqlBool } from "kysely";
import type { Queries, Store, Tx } from "../../db/store.ts";
import type { GroupsTable } from "../../db/schema.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { groupNameOf } from "./name.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { LabgateError } from "../../util/errors.ts";
import { DEFAULT_POLICY } from "./policy.ts";
import { allowed, MSG_FORBIDDEN, unguarded, withinGrants, type ChangeGuard } from "../permissions/permissions.ts";
import type { Identity } from "../../app/context.ts";
import type { Group, GroupV1 } from "./schema.ts";
import { countDevices, deviceExists, deviceIdsOutsideGroup, type DeviceFilter } from "../devices/devices.ts";
import { packageExists } from "../packages/packages.ts";

export const DEFAULT_PRIORITY = 25;

/** A group row as stored. */
export type GroupRow = Selectable<GroupsTable>;

const COLUMNS = ["g.id", "g.created", "g.metadata", "g.policy", "g.priority", "g.created_by"] as const;

export async function getGroup(q: Queries, id: number): Promise<GroupRow | undefined> {
  return q.selectFrom("groups as g").select(COLUMNS).where("g.id", "=", id).executeTakeFirst();
}

/** Groups (alias `g`), optionally narrowed by a condition such as a permission filter. */
export async function listGroups(q: Queries, where?: Expression<SqlBool>): Promise<GroupRow[]> {
  return q
    .selectFrom("groups as g")
    .select(COLUMNS)
    .$if(where !== undefined, (qb) => qb.where(where!))
    .orderBy("g.id")
    .execute();
}

/** Every membership, each device's rows in the order its groups apply (priority, then id): its first is its active group. */
export async function membershipsByPriority(q: Queries): Promise<Array<{ device_id: number; group_id: number }>> {
  return q.selectFrom("group_devices as gd").innerJoin("groups as g", "g.id", "gd.group_id").select(["gd.device_id", "gd.group_id"]).orderBy("gd.device_id").orderBy("g.priority").orderBy("g.id").execute();
}

/** A group's policy column, or undefined when there is no such group. */
export async function groupPolicy(q: Queries, groupId: number): Promise<string | undefined> {
  return (await q.selectFrom("groups").select("policy").where("id", "=", groupId).executeTakeFirst())?.policy;
}

/** Sets a group's policy column in `tx` (the caller tells the catalog: `changed`). */
export async function setPolicyIn(tx: Tx, groupId: number, policy: string): Promise<void> {
  await tx.updateTable("groups").set({ policy }).where("id", "=", groupId).execute();
}

/** The package rows a group holds, by package id. */
export async function packagesOfGroup(q: Queries, groupId: number): Promise<Array<{ id: number; created: string; sha256: string; storage_name: string; metadata: string }>> {
  return q
    .selectFrom("group_packages as gp")
    .innerJoin("packages as p", "p.id", "gp.package_id")
    .select(["p.id", "p.created", "p.sha256", "p.storage_name", "p.metadata"])
    .where("gp.group_id", "=", groupId)
    .orderBy("p.id")
    .execute();
}

/** The devices that are members of a group, as a condition on `d`. */
export function memberFilter(groupId: number): Expression<SqlBool> {
  return sql<SqlBool>`d.id IN (SELECT gd.device_id FROM group_devices gd WHERE gd.group_id = ${groupId})`;
}

/** The groups (those `visible` lets through, alias `g`) that hold a package, by id. */
export async function groupsHoldingPackage(q: Queries, packageId: number, visible: Expression<SqlBool> | undefined): Promise<Array<{ id: number; metadata: string }>> {
  return q
    .selectFrom("groups as g")
    .innerJoin("group_packages as gp", "gp.group_id", "g.id")
    .select(["g.id", "g.metadata"])
    .where("gp.package_id", "=", packageId)
    .$if(visible !== undefined, (qb) => qb.where(visible!))
    .orderBy("g.id")
    .execute();
}

/** The ids of the groups (alias `g`) a condition selects, e.g. a permission filter. */
export async function groupIdsMatching(q: Queries, where: Expression<SqlBool>): Promise<number[]> {
  return (await q.selectFrom("groups as g").select("g.id").where(where).execute()).map((r) => r.id);
}

export const groupDeviceIds = async (q: Queries, groupId: number): Promise<number[]> =>
  (await q.selectFrom("group_devices").select("device_id").where("group_id", "=", groupId).orderBy("device_id").execute()).map((r) => r.device_id);

export const groupPackageIds = async (q: Queries, groupId: number): Promise<number[]> =>
  (await q.selectFrom("group_packages").select("package_id").where("group_id", "=", groupId).orderBy("package_id").execute()).map((r) => r.package_id);

export async function toV2(q: Queries, row: GroupRow): Promise<Group> {
  return { ...(await toV1(q, row)), priority: row.priority };
}

export async function toV1(q: Queries, row: GroupRow): Promise<GroupV1> {
  return {
    id: row.id,
    created: rfc822(new Date(row.created)),
    packages: await groupPackageIds(q, row.id),
    devices: await groupDeviceIds(q, row.id),
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    policy: row.policy,
  };
}

/**
 * Told of every write that changes what an update check could answer (memberships, policies,
 * priorities, assignments): the update domain's catalog (updatecheck/catalog.ts). `changed` tells
 * it before the transaction runs and again once it has ended, so that inputs a check read
 * meanwhile are not kept.
 */
export interface CatalogWatch {
  changed(): void;
}
/** Wraps a write that changes the catalog (here and in deployments/): `changed(catalog, store.transact(...))`. */
export async function changed<T>(catalog: CatalogWatch, write: Promise<T>): Promise<T> {
  catalog.changed();
  try {
    return await write;
  } finally {
    catalog.changed();
  }
}

export interface NewGroup {
  metadata: Record<string, unknown>;
  /** The metadata prefix: the audit log names the group by `<prefix>.group.name` (name.ts). */
  prefix: string;
  priority?: number;
  createdBy: string | null;
  /** Runs inside the insert transaction (creator grants). */
  onCreated?: (tx: Tx, id: number) => Promise<void>;
}

export async function createGroup(store: Store, input: NewGroup, now: Date, actor: Actor): Promise<GroupRow> {
  return store.transact(async (tx) => {
    const priority = input.priority ?? DEFAULT_PRIORITY;
    const { id } = await tx
      .insertInto("groups")
      .values({ created: isoTime(now), metadata: JSON.stringify(input.metadata), policy: DEFAULT_POLICY, priority, created_by: input.createdBy })
      .returning("id")
      .executeTakeFirstOrThrow();
    await input.onCreated?.(tx, id);
    const name = groupNameOf(input.metadata, input.prefix);
    await recordAudit(tx, actor, "group.create", `group:${id}`, { ...(name !== undefined ? { name } : {}), priority });
    return (await getGroup(tx, id))!;
  });
}

export const GROUP_NOT_FOUND = "group does not exist";

/** A group without devices can be deleted; its package assignments and permission rows go with it. */
export async function deleteGroup(store: Store, catalog: CatalogWatch, id: number, actor: Actor, onDelete?: (tx: Tx) => Promise<void>): Promise<void> {
  return changed(catalog, store.transact(async (tx) => {
    if (!(await getGroup(tx, id))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    if (await tx.selectFrom("group_devices").select("device_id").where("group_id", "=", id).limit(1).executeTakeFirst()) throw new LabgateError("conflict", "group is still assigned to some devices");
    await onDelete?.(tx);
    await tx.deleteFrom("group_packages").where("group_id", "=", id).execute();
    await tx.deleteFrom("groups").where("id", "=", id).execute();
    await recordAudit(tx, actor, "group.delete", `group:${id}`);
  }));
}

/**
 * v2: a device may not hold two groups of the same priority (the target included).
 * v1: a device may hold at most one group.
 */
export type MembershipRule = "priority" | "single";

/** Whether a device already holds a group that `rule` says it may not hold beside one of `priority`. */
async function membershipClash(q: Queries, deviceId: number, rule: MembershipRule, priority: number): Promise<boolean> {
  const found = await q
    .selectFrom("group_devices as gd")
    .innerJoin("groups as g", "g.id", "gd.group_id")
    .select("gd.group_id")
    .where("gd.device_id", "=", deviceId)
    .$if(rule === "priority", (qb) => qb.where("g.priority", "=", priority))
    .limit(1)
    .executeTakeFirst();
  return found !== undefined;
}

/**
 * PATCH devices: atomic; additions are evaluated first, then removals; an
 * unknown device, an addition that breaks the membership rule, or the removal of a device that
 * is not (after the additions) in the group makes the whole request a 409 and changes nothing.
 * `guard` runs the change (membership grants the group's permissions, see permissions.ts).
 */
export async function patchGroupDevices(
  store: Store,
  catalog: CatalogWatch,
  groupId: number,
  add: number[],
  remove: number[],
  rule: MembershipRule,
  actor: Actor,
  guard: ChangeGuard = unguarded,
): Promise<void> {
  return changed(catalog, store.transact(async (tx) => {
    const group = await getGroup(tx, groupId);
    if (!group) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const members = new Set(await groupDeviceIds(tx, groupId));
    for (const deviceId of add) {
      if (!(await deviceExists(tx, deviceId))) throw new LabgateError("conflict", `conflict while assigning device, device ${deviceId} does not exist`);
      if (await membershipClash(tx, deviceId, rule, group.priority)) {
        throw new LabgateError(
          "conflict",
          rule === "single"
            ? `device ${deviceId} is already assigned to a group`
            : "A group with the same priority is already assigned to one of the devices requested to be added",
        );
      }
      members.add(deviceId);
    }
    for (const deviceId of remove) {
      if (!members.has(deviceId)) throw new LabgateError("conflict", `device ${deviceId} is not assigned to this group`);
    }
    await guard(tx, async () => {
      if (add.length > 0) await tx.insertInto("group_devices").values(add.map((deviceId) => ({ group_id: groupId, device_id: deviceId }))).execute();
      if (remove.length > 0) await tx.deleteFrom("group_devices").where("group_id", "=", groupId).where("device_id", "in", remove).execute();
    });
    await recordAudit(tx, actor, "group.devices", `group:${groupId}`, { add, remove });
  }));
}

/**
 * Each group `groups` selects (alias `g`, all when absent) with how many of its members `devices`
 * selects (alias `d`, all when absent), by group id; groups without such members are left out.
 */
export async function groupMemberCounts(q: Queries, devices: Expression<SqlBool> | undefined, groups: Expression<SqlBool> | undefined): Promise<Array<{ metadata: string; n: number }>> {
  return q
    .selectFrom("groups as g")
    .innerJoin("group_devices as gd", "gd.group_id", "g.id")
    .innerJoin("devices as d", "d.id", "gd.device_id")
    .select((eb) => ["g.metadata", eb.fn.countAll<number>().as("n")])
    .$if(devices !== undefined, (qb) => qb.where(devices!))
    .$if(groups !== undefined, (qb) => qb.where(groups!))
    .groupBy(["g.id", "g.metadata"])
    .orderBy("g.id")
    .execute();
}

/**
 * The devices `where` matches that are not members of the group yet, for an "add all matching";
 * 400 when more than `max` match (a filter that wide is a mistake more often than not).
 */
export async function matchingNonMembers(q: Queries, groupId: number, where: DeviceFilter, max: number): Promise<number[]> {
  const total = await countDevices(q, where);
  if (total > max) throw new LabgateError("invalid", `${total} devices match: at most ${max} are added at once; narrow the filter`);
  return deviceIdsOutsideGroup(q, where, groupId);
}

/**
 * THE package assignment of a group, whichever route asks (the group's package route, a
 * deployment's `packages`), inside the caller's transaction: `packageIds` become the group's
 * packages (`replace`) or join them (`add`). Group permissions reach the group's packages, so each
 * package newly assigned needs `update` on it (403 naming it, before anything says whether it
 * exists: then 404) and may grant none of the group's holders a permission the caller does not
 * hold on it (withinGrants: 403). Audited as `group.packages`. Returns the group's packages after.
 */
export async function assignPackages(tx: Tx, identity: Identity, groupId: number, packageIds: number[], how: "replace" | "add", actor: Actor): Promise<number[]> {
  const current = await groupPackageIds(tx, groupId);
  const had = new Set(current);
  const wanted = [...new Set(packageIds)];
  const added = wanted.filter((id) => !had.has(id));
  for (const id of added) if (!(await allowed(tx, identity, "package", id, "update"))) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: package ${id}`);
  for (const id of added) if (!(await packageExists(tx, id))) throw new LabgateError("not_found", `package ${id} does not exist`);
  const removed = how === "replace" ? current.filter((id) => !wanted.includes(id)) : [];
  await withinGrants(tx, identity, added.map((id) => ({ resource: "package" as const, id })), async () => {
    if (removed.length > 0) await tx.deleteFrom("group_packages").where("group_id", "=", groupId).where("package_id", "in", removed).execute();
    if (added.length > 0) await tx.insertInto("group_packages").values(added.map((id) => ({ group_id: groupId, package_id: id }))).execute();
  });
  const after = await groupPackageIds(tx, groupId);
  await recordAudit(tx, actor, "group.packages", `group:${groupId}`, { packages: after });
  return after;
}

/** The group's package route: the set becomes exactly `packageIds` (assignPackages). */
export async function setGroupPackages(store: Store, catalog: CatalogWatch, groupId: number, packageIds: number[], identity: Identity, actor: Actor): Promise<void> {
  try {
    await changed(catalog, store.transact(async (tx) => {
      if (!(await getGroup(tx, groupId))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
      await assignPackages(tx, identity, groupId, packageIds, "replace", actor);
    }));
  } catch (error) {
    // Only a constraint firing after the checks above (a concurrent change) lands here.
    if (!(error instanceof LabgateError) && /constraint|violates/i.test((error as Error).message)) throw new LabgateError("conflict", "conflict while assigning package, the package or group changed during the operation");
    throw error;
  }
}

export async function setGroupPolicy(store: Store, catalog: CatalogWatch, groupId: number, policy: string, actor: Actor): Promise<void> {
  return changed(catalog, store.transact(async (tx) => {
    const group = await getGroup(tx, groupId);
    if (!group) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    await setPolicyIn(tx, groupId, policy);
    await recordAudit(tx, actor, "group.policy", `group:${groupId}`, { from: group.policy, to: policy });
  }));
}

/** Priority change: 409 when a device of this group holds another group with that priority. */
export async function setGroupPriority(store: Store, catalog: CatalogWatch, groupId: number, priority: number, actor: Actor): Promise<void> {
  return changed(catalog, store.transact(async (tx) => {
    if (!(await getGroup(tx, groupId))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const clash = await tx
      .selectFrom("group_devices as mine")
      .innerJoin("group_devices as other", (join) => join.onRef("other.device_id", "=", "mine.device_id").onRef("other.group_id", "<>", "mine.group_id"))
      .innerJoin("groups as g", "g.id", "other.group_id")
      .select("mine.device_id")
      .where("mine.group_id", "=", groupId)
      .where("g.priority", "=", priority)
      .limit(1)
      .executeTakeFirst();
    if (clash) throw new LabgateError("conflict", "A group with the same priority is already assigned to one of the devices in this group");
    await tx.updateTable("groups").set({ priority }).where("id", "=", groupId).execute();
    await recordAudit(tx, actor, "group.priority", `group:${groupId}`, { priority });
  }));
}
