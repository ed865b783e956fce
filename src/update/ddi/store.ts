/*
 * The DDI tables (migration 033): targets and their token digests, the actions offered to them,
 * and the SHA-1/MD5 of the packages they download. Only this module queries them.
 */
import type { Selectable } from "kysely";
import type { DdiActionsTable, DdiTargetsTable } from "../../db/schema.ts";
import type { Queries } from "../../db/store.ts";

export type TargetRow = Selectable<DdiTargetsTable>;
export type ActionRow = Selectable<DdiActionsTable>;
/** An action is `open` until the device closes it (`closed`) or acknowledges its cancel (`canceled`). */
export type ActionState = "open" | "closed" | "canceled";

export const getTarget = (q: Queries, controllerId: string): Promise<TargetRow | undefined> =>
  q.selectFrom("ddi_targets").selectAll().where("controller_id", "=", controllerId).executeTakeFirst();

export const targetOfDevice = (q: Queries, deviceId: number): Promise<TargetRow | undefined> =>
  q.selectFrom("ddi_targets").selectAll().where("device_id", "=", deviceId).executeTakeFirst();

export async function insertTarget(q: Queries, row: TargetRow): Promise<void> {
  await q.insertInto("ddi_targets").values(row).execute();
}

/** Sets (or, with null, revokes) a target's token; false when there is no such target. */
export async function setTargetToken(q: Queries, controllerId: string, tokenSha256: string | null, at: string): Promise<boolean> {
  const result = await q.updateTable("ddi_targets").set({ token_sha256: tokenSha256, token_set: at }).where("controller_id", "=", controllerId).executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** The device's open action, newest first (there is at most one). */
export const openAction = (q: Queries, deviceId: number): Promise<ActionRow | undefined> =>
  q.selectFrom("ddi_actions").selectAll().where("device_id", "=", deviceId).where("state", "=", "open").orderBy("id", "desc").limit(1).executeTakeFirst();

export const getAction = (q: Queries, deviceId: number, id: number): Promise<ActionRow | undefined> =>
  q.selectFrom("ddi_actions").selectAll().where("device_id", "=", deviceId).where("id", "=", id).executeTakeFirst();

export const recentActions = (q: Queries, deviceId: number, limit: number): Promise<ActionRow[]> =>
  q.selectFrom("ddi_actions").selectAll().where("device_id", "=", deviceId).orderBy("id", "desc").limit(limit).execute();

export async function insertAction(q: Queries, row: Omit<ActionRow, "id">): Promise<number> {
  const { id } = await q.insertInto("ddi_actions").values(row).returning("id").executeTakeFirstOrThrow();
  return Number(id);
}

/** Moves an open action on; false when it was no longer open (another feedback closed it). */
export async function updateAction(q: Queries, id: number, change: { state: ActionState; result?: string | null; details?: string | null; updated: string }): Promise<boolean> {
  const result = await q.updateTable("ddi_actions").set(change).where("id", "=", id).where("state", "=", "open").executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Keeps the newest `keep` actions of a device. */
export async function trimActions(q: Queries, deviceId: number, keep: number): Promise<void> {
  const kept = q.selectFrom("ddi_actions").select("id").where("device_id", "=", deviceId).orderBy("id", "desc").limit(keep);
  await q.deleteFrom("ddi_actions").where("device_id", "=", deviceId).where("state", "!=", "open").where("id", "not in", kept).execute();
}

export const artifactHashes = (q: Queries, packageId: number): Promise<{ sha1: string; md5: string } | undefined> =>
  q.selectFrom("ddi_artifacts").select(["sha1", "md5"]).where("package_id", "=", packageId).executeTakeFirst();

export async function storeArtifactHashes(q: Queries, packageId: number, hashes: { sha1: string; md5: string }): Promise<void> {
  await q.insertInto("ddi_artifacts").values({ package_id: packageId, ...hashes }).onConflict((oc) => oc.column("package_id").doNothing()).execute();
}
