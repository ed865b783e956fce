/*
 * Deployment rows (migrations 016, 017, 021, 023, 024): SQL only. The state machine is service.ts.
 */
import type { Database, Tx } from "../../db/index.ts";
import type { SqlFilter } from "../permissions/permissions.ts";
import { emptyCounts } from "./model.ts";
import { DEVICE_STATES, type Counts, type DeviceState, type MaintenanceWindow, type Status } from "./schema.ts";

/** A deployment row as stored. */
export interface DeploymentRow {
  id: number;
  group_id: number;
  version: string;
  status: Status;
  pause_reason: string | null;
  /** JSON number[]: cumulative device count at the end of each phase. */
  phases: string;
  current_phase: number;
  /** JSON string[]: ISO start time of each started phase. */
  phase_started: string;
  success_percent: number | null;
  /** Minutes. */
  success_wait: number | null;
  error_percent: number | null;
  /** Minutes. */
  device_timeout: number;
  retries: number;
  /** Seconds before the first retry (doubling at each further one). */
  retry_backoff: number;
  start_at: string | null;
  /** JSON MaintenanceWindow or NULL. */
  window: string | null;
  created: string;
  created_by: string | null;
  /** JSON {config, suite}: the test run that validates each installed device; NULL: none. */
  validation: string | null;
  /** JSON {power_cycle_after_minutes}; null: no recovery. */
  recover: string | null;
  started: string | null;
  finished: string | null;
  updated: string;
}

/** A device's row in a deployment, with the device's MAC and name. */
export interface MemberRow {
  device_id: number;
  mac_address: string;
  name: string;
  phase: number;
  position: number;
  state: DeviceState;
  progress: number | null;
  from_version: string | null;
  to_version: string | null;
  reason: string | null;
  output: string | null;
  attempt: number;
  failures: number;
  retry_at: string | null;
  offered_at: string | null;
  updated: string;
}

export const parseWindow = (row: DeploymentRow): MaintenanceWindow | null => (row.window ? (JSON.parse(row.window) as MaintenanceWindow) : null);
export const parsePhases = (row: DeploymentRow): number[] => JSON.parse(row.phases) as number[];
export const parsePhaseStarted = (row: DeploymentRow): string[] => JSON.parse(row.phase_started) as string[];

const COLUMNS =
  "dp.id, dp.group_id, dp.version, dp.status, dp.pause_reason, dp.phases, dp.current_phase, dp.phase_started, dp.success_percent, dp.success_wait, " +
  "dp.error_percent, dp.device_timeout, dp.retries, dp.retry_backoff, dp.start_at, dp.window, dp.created, dp.created_by, dp.validation, dp.recover, dp.started, dp.finished, dp.updated";

/** The deployments of a version to any of the groups, newest first, at most `limit`. */
export function deploymentsOfVersion(db: Database, version: string, groupIds: number[], limit: number): Array<{ id: number; group_id: number; version: string; status: Status; created: string }> {
  return db.all<{ id: number; group_id: number; version: string; status: Status; created: string }>(
    "SELECT id, group_id, version, status, created FROM deployments WHERE version = ? AND group_id IN (SELECT value FROM json_each(?)) ORDER BY id DESC LIMIT ?",
    [version, JSON.stringify(groupIds), limit],
  );
}

export function getDeployment(db: Database | Tx, id: number): DeploymentRow | undefined {
  return db.get<DeploymentRow>(`SELECT ${COLUMNS} FROM deployments dp WHERE dp.id = ?`, [id]);
}

/** The deployments that hold their group (scheduled, running, paused). */
export function activeDeployments(db: Database | Tx): DeploymentRow[] {
  return db.all<DeploymentRow>(`SELECT ${COLUMNS} FROM deployments dp WHERE dp.status IN ('scheduled', 'running', 'paused') ORDER BY dp.id`);
}

/** Devices of active deployments with a validation that installed and have no verdict yet (a stop interrupted it). */
export function unvalidatedMembers(db: Database | Tx): Array<{ deployment_id: number; device_id: number; version: string; validation: string }> {
  return db.all(
    `SELECT dp.id AS deployment_id, m.device_id, dp.version, dp.validation FROM deployments dp JOIN deployment_devices m ON m.deployment_id = dp.id
     WHERE dp.status IN ('scheduled', 'running', 'paused') AND dp.validation IS NOT NULL AND m.state = 'installed' AND m.validated IS NULL ORDER BY dp.id, m.position`,
  );
}

export function activeDeploymentOf(db: Database | Tx, groupId: number): DeploymentRow | undefined {
  return db.get<DeploymentRow>(`SELECT ${COLUMNS} FROM deployments dp WHERE dp.group_id = ? AND dp.status IN ('scheduled', 'running', 'paused') LIMIT 1`, [groupId]);
}

export interface DeploymentFilter {
  group?: number;
  status?: Status;
  version?: string;
  limit: number;
  offset: number;
}

/** A page of deployments (newest first) and how many match; `visible` narrows to groups the caller may read (alias `g`). */
export function listDeployments(db: Database, filter: DeploymentFilter, visible: SqlFilter | undefined): { rows: DeploymentRow[]; total: number } {
  const where: string[] = [];
  const params: (string | number)[] = [];
  if (filter.group !== undefined) where.push("dp.group_id = ?"), params.push(filter.group);
  if (filter.status !== undefined) where.push("dp.status = ?"), params.push(filter.status);
  if (filter.version !== undefined) where.push("dp.version = ?"), params.push(filter.version);
  if (visible) where.push(visible.sql), params.push(...visible.params);
  const from = `FROM deployments dp JOIN groups g ON g.id = dp.group_id${where.length ? ` WHERE ${where.join(" AND ")}` : ""}`;
  const total = db.get<{ n: number }>(`SELECT COUNT(*) AS n ${from}`, params)?.n ?? 0;
  const rows = db.all<DeploymentRow>(`SELECT ${COLUMNS} ${from} ORDER BY dp.id DESC LIMIT ? OFFSET ?`, [...params, filter.limit, filter.offset]);
  return { rows, total };
}

/** Device counts per phase and state, from the rows (for deployments that are not in memory). */
export function storedCounts(db: Database, id: number, phases: number): Counts[] {
  const counts = Array.from({ length: phases }, emptyCounts);
  for (const row of db.all<{ phase: number; state: DeviceState; n: number }>(
    "SELECT phase, state, COUNT(*) AS n FROM deployment_devices WHERE deployment_id = ? GROUP BY phase, state",
    [id],
  )) {
    if (counts[row.phase] && (DEVICE_STATES as readonly string[]).includes(row.state)) counts[row.phase][row.state] = row.n;
  }
  return counts;
}

export interface MemberFilter {
  state?: DeviceState;
  phase?: number;
  limit: number;
  offset: number;
}

const MEMBER_COLUMNS =
  "dd.device_id, d.mac_address, d.name, dd.phase, dd.position, dd.state, dd.progress, dd.from_version, dd.to_version, dd.reason, dd.output, dd.attempt, dd.failures, dd.retry_at, dd.offered_at, dd.updated";

/** A page of a deployment's devices in their recorded order, and how many match. */
export function listMembers(db: Database, id: number, filter: MemberFilter): { rows: MemberRow[]; total: number } {
  const where = ["dd.deployment_id = ?"];
  const params: (string | number)[] = [id];
  if (filter.state !== undefined) where.push("dd.state = ?"), params.push(filter.state);
  if (filter.phase !== undefined) where.push("dd.phase = ?"), params.push(filter.phase);
  const from = `FROM deployment_devices dd JOIN devices d ON d.id = dd.device_id WHERE ${where.join(" AND ")}`;
  const total = db.get<{ n: number }>(`SELECT COUNT(*) AS n ${from}`, params)?.n ?? 0;
  const rows = db.all<MemberRow>(`SELECT ${MEMBER_COLUMNS} ${from} ORDER BY dd.position LIMIT ? OFFSET ?`, [...params, filter.limit, filter.offset]);
  return { rows, total };
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
export function memberStates(db: Database | Tx, id: number): MemberState[] {
  return db.all("SELECT device_id, phase, state, offered_at, attempt, failures, offered_version, retry_at FROM deployment_devices WHERE deployment_id = ?", [id]);
}

/** A device's row in `deploymentId`, or its latest one (an outcome that arrives after its deployment ended). */
export function latestMembership(db: Database | Tx, deviceId: number, deploymentId?: number): { deployment_id: number; state: DeviceState; to_version: string | null; attempt: number } | undefined {
  if (deploymentId !== undefined) return db.get("SELECT deployment_id, state, to_version, attempt FROM deployment_devices WHERE device_id = ? AND deployment_id = ?", [deviceId, deploymentId]);
  return db.get("SELECT deployment_id, state, to_version, attempt FROM deployment_devices WHERE device_id = ? ORDER BY deployment_id DESC LIMIT 1", [deviceId]);
}

/** The devices failed (for good) in a deployment. */
export const failedMembers = (db: Database | Tx, id: number): number[] =>
  db.all<{ device_id: number }>("SELECT device_id FROM deployment_devices WHERE deployment_id = ? AND state = 'failed' ORDER BY position", [id]).map((r) => r.device_id);

/**
 * The versions devices failed for good: a device's latest row for a version (of any deployment)
 * is `failed`. A new deployment of that version, or a retry, makes a newer row that is not.
 */
export function heldOut(db: Database | Tx): Array<{ device_id: number; version: string }> {
  return db.all(
    `SELECT dd.device_id, dp.version FROM deployment_devices dd JOIN deployments dp ON dp.id = dd.deployment_id
     WHERE dd.state = 'failed' AND dd.deployment_id = (SELECT MAX(x.deployment_id) FROM deployment_devices x JOIN deployments y ON y.id = x.deployment_id WHERE x.device_id = dd.device_id AND y.version = dp.version)`,
  );
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

/** One durable transition of one device. Columns not named keep their value. */
export function updateMember(tx: Tx, deploymentId: number, deviceId: number, change: MemberChange): void {
  const sets = ["state = ?", "updated = ?"];
  const params: (string | number | null)[] = [change.state, change.at];
  const optional: Array<[string, string | number | null | undefined]> = [
    ["progress", change.progress],
    ["reason", change.reason],
    ["output", change.output],
    ["from_version", change.fromVersion],
    ["to_version", change.toVersion],
    ["offered_at", change.offeredAt],
    ["attempt", change.attempt],
    ["failures", change.failures],
    ["offered_version", change.offeredVersion],
    ["retry_at", change.retryAt],
  ];
  for (const [column, value] of optional) if (value !== undefined) sets.push(`${column} = ?`), params.push(value);
  tx.run(`UPDATE deployment_devices SET ${sets.join(", ")} WHERE deployment_id = ? AND device_id = ?`, [...params, deploymentId, deviceId]);
}

// --- update history ------------------------------------------------------------------------

export interface HistoryRow {
  id: number;
  device_id: number;
  deployment_id: number | null;
  from_version: string | null;
  to_version: string;
  outcome: string;
  attempt: number | null;
  reason: string | null;
  output: string | null;
  at: string;
}

/** One history row; `report_id` is the device's report that made it (none: the server decided it). */
export function addHistory(tx: Tx, entry: Omit<HistoryRow, "id" | "attempt" | "output"> & { attempt?: number | null; output?: string | null; report_id?: string | null }): void {
  tx.run("INSERT INTO update_history (device_id, deployment_id, from_version, to_version, outcome, attempt, reason, output, at, report_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
    entry.device_id,
    entry.deployment_id,
    entry.from_version,
    entry.to_version,
    entry.outcome,
    entry.attempt ?? null,
    entry.reason,
    entry.output ?? null,
    entry.at,
    entry.report_id ?? null,
  ]);
}

/** The newest history row of one attempt of a device in a deployment (its outcome). */
export const attemptHistoryId = (db: Database | Tx, deviceId: number, deploymentId: number, attempt: number): number | undefined =>
  db.get<{ id: number }>("SELECT id FROM update_history WHERE device_id = ? AND deployment_id = ? AND attempt = ? ORDER BY id DESC LIMIT 1", [deviceId, deploymentId, attempt])?.id;

/** Keeps a device's newest `keep` history rows. */
export function trimHistory(tx: Tx, deviceId: number, keep: number): void {
  tx.run("DELETE FROM update_history WHERE device_id = ? AND id <= (SELECT id FROM update_history WHERE device_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)", [deviceId, deviceId, keep]);
}

/** Whether the device's report `reportId` made a history row already (it is sent again when its acknowledgement was lost). */
export const reportApplied = (db: Database | Tx, deviceId: number, reportId: string): boolean =>
  db.get("SELECT 1 AS x FROM update_history WHERE device_id = ? AND report_id = ?", [deviceId, reportId]) !== undefined;

/** Whether a history row is still kept (the oldest are trimmed). */
export const historyEntryExists = (db: Database | Tx, id: number): boolean => db.get("SELECT 1 AS x FROM update_history WHERE id = ?", [id]) !== undefined;

/** A device's history, newest first. */
export function listHistory(db: Database, deviceId: number, limit: number, offset: number): { rows: HistoryRow[]; total: number } {
  const total = db.get<{ n: number }>("SELECT COUNT(*) AS n FROM update_history WHERE device_id = ?", [deviceId])?.n ?? 0;
  const rows = db.all<HistoryRow>(
    "SELECT id, device_id, deployment_id, from_version, to_version, outcome, attempt, reason, output, at FROM update_history WHERE device_id = ? ORDER BY id DESC LIMIT ? OFFSET ?",
    [deviceId, limit, offset],
  );
  return { rows, total };
}

/** The copy of a deployment's validation config that its devices run (opaque JSON, src/testrun/devices/validation.ts); null: none. */
export function validationCopy(db: Database | Tx, id: number): string | null {
  return db.get<{ copy: string | null }>("SELECT validation_copy AS copy FROM deployments WHERE id = ?", [id])?.copy ?? null;
}

export function pinValidation(tx: Tx, id: number, copy: string): void {
  tx.run("UPDATE deployments SET validation_copy = ? WHERE id = ?", [copy, id]);
}

/** A deployment's devices with their update history in it (oldest first), for its timeline. */
export function deploymentTraces(db: Database, id: number): Array<{ device_id: number; state: DeviceState; attempt: number; offered_at: string | null; updated: string; outcomes: Array<{ outcome: string; attempt: number | null; at: string }> }> {
  const traces = new Map(
    db
      .all<{ device_id: number; state: DeviceState; attempt: number; offered_at: string | null; updated: string }>(
        "SELECT device_id, state, attempt, offered_at, updated FROM deployment_devices WHERE deployment_id = ? ORDER BY position",
        [id],
      )
      .map((row) => [row.device_id, { ...row, outcomes: [] as Array<{ outcome: string; attempt: number | null; at: string }> }]),
  );
  // Through the members' rows: update_history is indexed by device, not by deployment.
  for (const h of db.all<{ device_id: number; outcome: string; attempt: number | null; at: string }>(
    "SELECT h.device_id, h.outcome, h.attempt, h.at FROM deployment_devices dd JOIN update_history h ON h.device_id = dd.device_id AND h.deployment_id = dd.deployment_id WHERE dd.deployment_id = ? ORDER BY h.id",
    [id],
  )) {
    traces.get(h.device_id)?.outcomes.push({ outcome: h.outcome, attempt: h.attempt, at: h.at });
  }
  return [...traces.values()];
}
