/*
 * Deployment rows (migrations 016, 017, 021, 023, 024): queries only. The state machine is service.ts.
 */
import type { Expression, Insertable, Selectable, SqlBool, Updateable } from "kysely";
import type { DeploymentDevicesTable, DeploymentsTable, UpdateHistoryTable } from "../../db/schema.ts";
import type { Queries, Tx } from "../../db/store.ts";
import { prepared } from "../../db/prepared.ts";
import { emptyCounts } from "./model.ts";
import { DEVICE_STATES, type Counts, type DeviceState, type MaintenanceWindow, type Status } from "./schema.ts";

/**
 * A deployment row as stored: `phases` is JSON number[] (cumulative device count at the end of each
 * phase), `phase_started` JSON string[] (ISO start of each started phase), `window` a JSON
 * MaintenanceWindow or NULL, `validation` JSON {config, suite} or NULL, `recover` JSON
 * {power_cycle_after_minutes} or NULL; waits in minutes, `retry_backoff` in seconds.
 */
export type DeploymentRow = Omit<Selectable<DeploymentsTable>, "status" | "validation_copy"> & { status: Status };

/** A device's row in a deployment, with the device's MAC and name. */
export type MemberRow = Omit<Selectable<DeploymentDevicesTable>, "deployment_id" | "state" | "validated" | "offered_version"> & { state: DeviceState; mac_address: string; name: string };

export const parseWindow = (row: DeploymentRow): MaintenanceWindow | null => (row.window ? (JSON.parse(row.window) as MaintenanceWindow) : null);
export const parsePhases = (row: DeploymentRow): number[] => JSON.parse(row.phases) as number[];
export const parsePhaseStarted = (row: DeploymentRow): string[] => JSON.parse(row.phase_started) as string[];

const COLUMNS = [
  "dp.id",
  "dp.group_id",
  "dp.version",
  "dp.status",
  "dp.pause_reason",
  "dp.phases",
  "dp.current_phase",
  "dp.phase_started",
  "dp.success_percent",
  "dp.success_wait",
  "dp.error_percent",
  "dp.device_timeout",
  "dp.retries",
  "dp.retry_backoff",
  "dp.start_at",
  "dp.window",
  "dp.created",
  "dp.created_by",
  "dp.validation",
  "dp.recover",
  "dp.started",
  "dp.finished",
  "dp.updated",
] as const;

const ACTIVE_STATUSES: Status[] = ["scheduled", "running", "paused"];

const deployments = (q: Queries) => q.selectFrom("deployments as dp").select(COLUMNS).$castTo<DeploymentRow>();

/** The deployments of a version to any of the groups, newest first, at most `limit`. */
export async function deploymentsOfVersion(q: Queries, version: string, groupIds: number[], limit: number): Promise<Array<{ id: number; group_id: number; version: string; status: Status; created: string }>> {
  if (groupIds.length === 0) return [];
  return q
    .selectFrom("deployments")
    .select(["id", "group_id", "version", "status", "created"])
    .where("version", "=", version)
    .where("group_id", "in", groupIds)
    .orderBy("id", "desc")
    .limit(limit)
    .$castTo<{ id: number; group_id: number; version: string; status: Status; created: string }>()
    .execute();
}

export function getDeployment(q: Queries, id: number): Promise<DeploymentRow | undefined> {
  return deployments(q).where("dp.id", "=", id).executeTakeFirst();
}

/** The deployments that hold their group (scheduled, running, paused). */
export function activeDeployments(q: Queries): Promise<DeploymentRow[]> {
  return deployments(q).where("dp.status", "in", ACTIVE_STATUSES).orderBy("dp.id").execute();
}

type Unvalidated = { deployment_id: number; device_id: number; version: string; validation: string };

/** Devices of active deployments with a validation that installed and have no verdict yet (a stop interrupted it). */
export function unvalidatedMembers(q: Queries): Promise<Unvalidated[]> {
  return q
    .selectFrom("deployments as dp")
    .innerJoin("deployment_devices as m", "m.deployment_id", "dp.id")
    .select(["dp.id as deployment_id", "m.device_id", "dp.version", "dp.validation"])
    .where("dp.status", "in", ACTIVE_STATUSES)
    .where("dp.validation", "is not", null)
    .where("m.state", "=", "installed")
    .where("m.validated", "is", null)
    .orderBy("dp.id")
    .orderBy("m.position")
    .$castTo<Unvalidated>()
    .execute();
}

export function activeDeploymentOf(q: Queries, groupId: number): Promise<DeploymentRow | undefined> {
  return deployments(q).where("dp.group_id", "=", groupId).where("dp.status", "in", ACTIVE_STATUSES).limit(1).executeTakeFirst();
}

export interface DeploymentFilter {
  group?: number;
  status?: Status;
  version?: string;
  limit: number;
  offset: number;
}

/** A page of deployments (newest first) and how many match; `visible` narrows to groups the caller may read (alias `g`). */
export async function listDeployments(q: Queries, filter: DeploymentFilter, visible: Expression<SqlBool> | undefined): Promise<{ rows: DeploymentRow[]; total: number }> {
  const matching = q
    .selectFrom("deployments as dp")
    .innerJoin("groups as g", "g.id", "dp.group_id")
    .$if(filter.group !== undefined, (qb) => qb.where("dp.group_id", "=", filter.group!))
    .$if(filter.status !== undefined, (qb) => qb.where("dp.status", "=", filter.status!))
    .$if(filter.version !== undefined, (qb) => qb.where("dp.version", "=", filter.version!))
    .$if(visible !== undefined, (qb) => qb.where(visible!));
  const total = await matching.select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirst();
  const rows = await matching.select(COLUMNS).$castTo<DeploymentRow>().orderBy("dp.id", "desc").limit(filter.limit).offset(filter.offset).execute();
  return { rows, total: Number(total?.n ?? 0) };
}

/** Device counts per phase and state, from the rows (for deployments that are not in memory). */
export async function storedCounts(q: Queries, id: number, phases: number): Promise<Counts[]> {
  const counts = Array.from({ length: phases }, emptyCounts);
  const rows = await q
    .selectFrom("deployment_devices")
    .select(["phase", "state", (eb) => eb.fn.countAll<number>().as("n")])
    .where("deployment_id", "=", id)
    .groupBy(["phase", "state"])
    .execute();
  for (const row of rows) {
    if (counts[row.phase] && (DEVICE_STATES as readonly string[]).includes(row.state)) counts[row.phase][row.state as DeviceState] = Number(row.n);
  }
  return counts;
}

export interface MemberFilter {
  state?: DeviceState;
  phase?: number;
  limit: number;
  offset: number;
}

/** A page of a deployment's devices in their recorded order, and how many match. */
export async function listMembers(q: Queries, id: number, filter: MemberFilter): Promise<{ rows: MemberRow[]; total: number }> {
  const matching = q
    .selectFrom("deployment_devices as dd")
    .innerJoin("devices as d", "d.id", "dd.device_id")
    .where("dd.deployment_id", "=", id)
    .$if(filter.state !== undefined, (qb) => qb.where("dd.state", "=", filter.state!))
    .$if(filter.phase !== undefined, (qb) => qb.where("dd.phase", "=", filter.phase!));
  const total = await matching.select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirst();
  const rows = await matching
    .select([
      "dd.device_id",
      "d.mac_address",
      "d.name",
      "dd.phase",
      "dd.position",
      "dd.state",
      "dd.progress",
      "dd.from_version",
      "dd.to_version",
      "dd.reason",
      "dd.output",
      "dd.attempt",
      "dd.failures",
      "dd.retry_at",
      "dd.offered_at",
      "dd.updated",
    ])
    .$castTo<MemberRow>()
    .orderBy("dd.position")
    .limit(filter.limit)
    .offset(filter.offset)
    .execute();
  return { rows, total: Number(total?.n ?? 0) };
}

/** What the service keeps in memory of a device of an active deployment. */
export interface MemberState {
  device_id: number;
  phase: number;
  state: DeviceState;
  offered_at: string | null;
  attempt: number;
  failures: number;
  offered_version: string | null;
  retry_at: string | null;
}

/** The member rows the service keeps in memory for an active deployment. */
export function memberStates(q: Queries, id: number): Promise<MemberState[]> {
  return q
    .selectFrom("deployment_devices")
    .select(["device_id", "phase", "state", "offered_at", "attempt", "failures", "offered_version", "retry_at"])
    .where("deployment_id", "=", id)
    .$castTo<MemberState>()
    .execute();
}

type Membership = { deployment_id: number; state: DeviceState; to_version: string | null; attempt: number };

/** A device's row in `deploymentId`, or its latest one (an outcome that arrives after its deployment ended). */
export function latestMembership(q: Queries, deviceId: number, deploymentId?: number): Promise<Membership | undefined> {
  return q
    .selectFrom("deployment_devices")
    .select(["deployment_id", "state", "to_version", "attempt"])
    .where("device_id", "=", deviceId)
    .$if(deploymentId !== undefined, (qb) => qb.where("deployment_id", "=", deploymentId!))
    .orderBy("deployment_id", "desc")
    .limit(1)
    .$castTo<Membership>()
    .executeTakeFirst();
}

/** The devices failed (for good) in a deployment. */
export async function failedMembers(q: Queries, id: number): Promise<number[]> {
  const rows = await q.selectFrom("deployment_devices").select("device_id").where("deployment_id", "=", id).where("state", "=", "failed").orderBy("position").execute();
  return rows.map((r) => r.device_id);
}

/**
 * The versions devices failed for good: a device's latest row for a version (of any deployment)
 * is `failed`. A new deployment of that version, or a retry, makes a newer row that is not.
 */
export function heldOut(q: Queries): Promise<Array<{ device_id: number; version: string }>> {
  return q
    .selectFrom("deployment_devices as dd")
    .innerJoin("deployments as dp", "dp.id", "dd.deployment_id")
    .select(["dd.device_id", "dp.version"])
    .where("dd.state", "=", "failed")
    .where("dd.deployment_id", "=", (eb) =>
      eb
        .selectFrom("deployment_devices as x")
        .innerJoin("deployments as y", "y.id", "x.deployment_id")
        .select((e) => e.fn.max("x.deployment_id").as("latest"))
        .whereRef("x.device_id", "=", "dd.device_id")
        .whereRef("y.version", "=", "dp.version"),
    )
    .execute();
}

export interface MemberChange {
  state: DeviceState;
  at: string;
  progress?: number | null;
  reason?: string | null;
  output?: string | null;
  fromVersion?: string | null;
  toVersion?: string | null;
  offeredAt?: string | null;
  attempt?: number;
  failures?: number;
  offeredVersion?: string | null;
  retryAt?: string | null;
}

/** The columns a change sets (those it does not name keep their value). */
function memberColumns(change: MemberChange): Updateable<DeploymentDevicesTable> {
  const set: Updateable<DeploymentDevicesTable> = { state: change.state, updated: change.at };
  if (change.progress !== undefined) set.progress = change.progress;
  if (change.reason !== undefined) set.reason = change.reason;
  if (change.output !== undefined) set.output = change.output;
  if (change.fromVersion !== undefined) set.from_version = change.fromVersion;
  if (change.toVersion !== undefined) set.to_version = change.toVersion;
  if (change.offeredAt !== undefined) set.offered_at = change.offeredAt;
  if (change.attempt !== undefined) set.attempt = change.attempt;
  if (change.failures !== undefined) set.failures = change.failures;
  if (change.offeredVersion !== undefined) set.offered_version = change.offeredVersion;
  if (change.retryAt !== undefined) set.retry_at = change.retryAt;
  return set;
}

/** The transition's statement for each set of columns (a device's moves take a handful of shapes). */
const memberUpdates = new Map<string, (q: Queries, ...values: unknown[]) => Promise<unknown>>();

/** One durable transition of one device. Columns not named keep their value. */
export async function updateMember(tx: Tx, deploymentId: number, deviceId: number, change: MemberChange): Promise<void> {
  const set = memberColumns(change);
  const columns = Object.keys(set) as Array<keyof typeof set>;
  const shape = columns.join(",");
  let update = memberUpdates.get(shape);
  if (!update) {
    update = prepared((q: Queries, ...values: unknown[]) =>
      q
        .updateTable("deployment_devices")
        .set(Object.fromEntries(columns.map((column, i) => [column, values[i]])))
        .where("deployment_id", "=", values[columns.length] as number)
        .where("device_id", "=", values[columns.length + 1] as number),
    );
    memberUpdates.set(shape, update);
  }
  await update(tx, ...columns.map((column) => set[column]), deploymentId, deviceId);
}

/** The same transition of several devices of a deployment, in one statement. */
export async function updateMembers(tx: Tx, deploymentId: number, deviceIds: readonly number[], change: MemberChange): Promise<void> {
  if (deviceIds.length === 0) return;
  await tx
    .updateTable("deployment_devices")
    .set(memberColumns(change))
    .where("deployment_id", "=", deploymentId)
    .where("device_id", "in", [...deviceIds])
    .execute();
}

const progressUpdate = prepared((q: Queries, deploymentId: number, deviceId: number, percent: number, at: string) =>
  q.updateTable("deployment_devices").set({ progress: percent, updated: at }).where("deployment_id", "=", deploymentId).where("device_id", "=", deviceId),
);

/** A device's progress percent (the state it belongs to is durable already). */
export async function memberProgress(tx: Tx, deploymentId: number, deviceId: number, percent: number, at: string): Promise<void> {
  await progressUpdate(tx, deploymentId, deviceId, percent, at);
}

type NewMember = { deployment_id: number; device_id: number; phase: number; position: number; from_version: string | null; to_version: string; updated: string };
const MEMBER_COLUMNS = ["deployment_id", "device_id", "phase", "position", "from_version", "to_version", "updated"] as const;
/** Rows per statement: within what both engines bind, and short enough to run between two turns of the event loop. */
const MEMBERS_PER_INSERT = 64;

/** The insert of `n` members (a power of two up to MEMBERS_PER_INSERT), compiled once per size. */
const memberInserts = new Map<number, (q: Queries, ...values: unknown[]) => Promise<unknown>>();
function memberInsert(n: number): (q: Queries, ...values: unknown[]) => Promise<unknown> {
  let insert = memberInserts.get(n);
  if (!insert) {
    const width = MEMBER_COLUMNS.length;
    insert = prepared((q: Queries, ...values: unknown[]) =>
      q.insertInto("deployment_devices").values(
        Array.from({ length: n }, (_, row) => ({ ...(Object.fromEntries(MEMBER_COLUMNS.map((column, i) => [column, values[row * width + i]])) as NewMember), state: "waiting" })),
      ),
    );
    memberInserts.set(n, insert);
  }
  return insert;
}

/** The devices of a new deployment, `waiting`, in their recorded order; `between` runs between two statements. */
export async function insertMembers(tx: Tx, rows: readonly NewMember[], between: () => Promise<void>): Promise<void> {
  // The last rows in chunks of the powers of two their number is made of: seven shapes in all.
  for (let at = 0; at < rows.length; ) {
    if (at > 0) await between();
    let size = MEMBERS_PER_INSERT;
    while (size > rows.length - at) size /= 2;
    const chunk = rows.slice(at, at + size);
    await memberInsert(size)(tx, ...chunk.flatMap((r) => MEMBER_COLUMNS.map((column) => r[column])));
    at += size;
  }
}

/** A new deployment's row; resolves with its id. */
export async function insertDeployment(tx: Tx, row: Insertable<DeploymentsTable>): Promise<number> {
  const { id } = await tx.insertInto("deployments").values(row).returning("id").executeTakeFirstOrThrow();
  return id;
}

/** Writes deployment columns. */
export async function updateDeployment(tx: Tx, id: number, fields: Updateable<DeploymentsTable>): Promise<void> {
  await tx.updateTable("deployments").set(fields).where("id", "=", id).execute();
}

/** The versions a member's row records (its history rows name them). */
export function memberVersions(q: Queries, deploymentId: number, deviceId: number): Promise<{ from_version: string | null; to_version: string | null } | undefined> {
  return q.selectFrom("deployment_devices").select(["from_version", "to_version"]).where("deployment_id", "=", deploymentId).where("device_id", "=", deviceId).executeTakeFirst();
}

/** The validation of a device's install passed (only while it is still `installed`). */
export async function markValidated(q: Queries, deploymentId: number, deviceId: number, at: string): Promise<void> {
  await q.updateTable("deployment_devices").set({ validated: at }).where("deployment_id", "=", deploymentId).where("device_id", "=", deviceId).where("state", "=", "installed").execute();
}

// --- update history ------------------------------------------------------------------------

export type HistoryRow = Omit<Selectable<UpdateHistoryTable>, "report_id">;

const insertHistory = prepared(
  (
    q: Queries,
    device_id: number,
    deployment_id: number | null,
    from_version: string | null,
    to_version: string,
    outcome: string,
    attempt: number | null,
    reason: string | null,
    output: string | null,
    at: string,
    report_id: string | null,
  ) => q.insertInto("update_history").values({ device_id, deployment_id, from_version, to_version, outcome, attempt, reason, output, at, report_id }),
);

/** One history row; `report_id` is the device's report that made it (none: the server decided it). */
export async function addHistory(tx: Tx, entry: Omit<HistoryRow, "id" | "attempt" | "output"> & { attempt?: number | null; output?: string | null; report_id?: string | null }): Promise<void> {
  const { device_id, deployment_id, from_version, to_version, outcome, reason, at } = entry;
  await insertHistory(tx, device_id, deployment_id, from_version, to_version, outcome, entry.attempt ?? null, reason, entry.output ?? null, at, entry.report_id ?? null);
}

/** The newest history row of a device (to tell a report sent again from a new one). */
export function newestHistory(q: Queries, deviceId: number): Promise<{ to_version: string; outcome: string } | undefined> {
  return q.selectFrom("update_history").select(["to_version", "outcome"]).where("device_id", "=", deviceId).orderBy("id", "desc").limit(1).executeTakeFirst();
}

/** The newest history row of one attempt of a device in a deployment (its outcome). */
export function attemptHistoryId(q: Queries, deviceId: number, deploymentId: number, attempt: number): Promise<number | undefined> {
  return q
    .selectFrom("update_history")
    .select("id")
    .where("device_id", "=", deviceId)
    .where("deployment_id", "=", deploymentId)
    .where("attempt", "=", attempt)
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst()
    .then((row) => row?.id);
}

/** Whether an attempt's history already answers a report of `version`: its failure, or `version` installed in it. */
export async function attemptAnswered(q: Queries, deviceId: number, deploymentId: number, attempt: number, version: string): Promise<boolean> {
  const row = await q
    .selectFrom("update_history")
    .select("id")
    .where("device_id", "=", deviceId)
    .where("deployment_id", "=", deploymentId)
    .where("attempt", "=", attempt)
    .where((eb) => eb.or([eb("outcome", "=", "failed"), eb("to_version", "=", version)]))
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

/** Keeps a device's newest `keep` history rows. */
export async function trimHistory(tx: Tx, deviceId: number, keep: number): Promise<void> {
  const edge = await tx.selectFrom("update_history").select("id").where("device_id", "=", deviceId).orderBy("id", "desc").limit(1).offset(keep).executeTakeFirst();
  if (edge) await tx.deleteFrom("update_history").where("device_id", "=", deviceId).where("id", "<=", edge.id).execute();
}

const reportRow = prepared((q: Queries, deviceId: number, reportId: string) => q.selectFrom("update_history").select("id").where("device_id", "=", deviceId).where("report_id", "=", reportId).limit(1));

/** Whether the device's report `reportId` made a history row already (it is sent again when its acknowledgement was lost). */
export async function reportApplied(q: Queries, deviceId: number, reportId: string): Promise<boolean> {
  return (await reportRow(q, deviceId, reportId)).rows.length > 0;
}

/** Whether a history row is still kept (the oldest are trimmed). */
export function historyEntryExists(q: Queries, id: number): Promise<boolean> {
  return q
    .selectFrom("update_history")
    .select("id")
    .where("id", "=", id)
    .executeTakeFirst()
    .then((row) => row !== undefined);
}

/** A device's history, newest first. */
export async function listHistory(q: Queries, deviceId: number, limit: number, offset: number): Promise<{ rows: HistoryRow[]; total: number }> {
  const total = await q.selectFrom("update_history").select((eb) => eb.fn.countAll<number>().as("n")).where("device_id", "=", deviceId).executeTakeFirst();
  const rows = await q
    .selectFrom("update_history")
    .select(["id", "device_id", "deployment_id", "from_version", "to_version", "outcome", "attempt", "reason", "output", "at"])
    .where("device_id", "=", deviceId)
    .orderBy("id", "desc")
    .limit(limit)
    .offset(offset)
    .execute();
  return { rows, total: Number(total?.n ?? 0) };
}

/** The copy of a deployment's validation config that its devices run (opaque JSON, src/testrun/devices/validation.ts); null: none. */
export function validationCopy(q: Queries, id: number): Promise<string | null> {
  return q
    .selectFrom("deployments")
    .select("validation_copy")
    .where("id", "=", id)
    .executeTakeFirst()
    .then((row) => row?.validation_copy ?? null);
}

export function pinValidation(q: Queries, id: number, copy: string): Promise<void> {
  return q
    .updateTable("deployments")
    .set({ validation_copy: copy })
    .where("id", "=", id)
    .execute()
    .then(() => {});
}

type Trace = { device_id: number; state: DeviceState; attempt: number; offered_at: string | null; updated: string; outcomes: Array<{ outcome: string; attempt: number | null; at: string }> };

/** A deployment's devices with their update history in it (oldest first), for its timeline. */
export async function deploymentTraces(q: Queries, id: number): Promise<Trace[]> {
  const members = await q.selectFrom("deployment_devices").select(["device_id", "state", "attempt", "offered_at", "updated"]).where("deployment_id", "=", id).orderBy("position").execute();
  const traces = new Map<number, Trace>(members.map((row) => [row.device_id, { ...row, state: row.state as DeviceState, outcomes: [] }]));
  // Through the members' rows: update_history is indexed by device, not by deployment.
  const outcomes = await q
    .selectFrom("deployment_devices as dd")
    .innerJoin("update_history as h", (join) => join.onRef("h.device_id", "=", "dd.device_id").onRef("h.deployment_id", "=", "dd.deployment_id"))
    .select(["h.device_id", "h.outcome", "h.attempt", "h.at"])
    .where("dd.deployment_id", "=", id)
    .orderBy("h.id")
    .execute();
  for (const h of outcomes) traces.get(h.device_id)?.outcomes.push({ outcome: h.outcome, attempt: h.attempt, at: h.at });
  return [...traces.values()];
}
