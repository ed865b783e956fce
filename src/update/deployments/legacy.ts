/*
 * The deployment queries that other areas' synchronous `db.write` transactions and start-up code
 * still call with the synchronous database (store.ts takes either): the same statements as
 * store.ts's. This file goes once those callers query through the Store.
 */
import type { Database, Tx } from "../../db/index.ts";
import type { DeploymentRow } from "./store.ts";
import type { DeviceState } from "./schema.ts";

const COLUMNS =
  "dp.id, dp.group_id, dp.version, dp.status, dp.pause_reason, dp.phases, dp.current_phase, dp.phase_started, dp.success_percent, dp.success_wait, " +
  "dp.error_percent, dp.device_timeout, dp.retries, dp.retry_backoff, dp.start_at, dp.window, dp.created, dp.created_by, dp.validation, dp.recover, dp.started, dp.finished, dp.updated";

export const getDeployment = (db: Database | Tx, id: number): DeploymentRow | undefined => db.get<DeploymentRow>(`SELECT ${COLUMNS} FROM deployments dp WHERE dp.id = ?`, [id]);

export const activeDeployments = (db: Database | Tx): DeploymentRow[] =>
  db.all<DeploymentRow>(`SELECT ${COLUMNS} FROM deployments dp WHERE dp.status IN ('scheduled', 'running', 'paused') ORDER BY dp.id`);

export const unvalidatedMembers = (db: Database | Tx): Array<{ deployment_id: number; device_id: number; version: string; validation: string }> =>
  db.all(
    `SELECT dp.id AS deployment_id, m.device_id, dp.version, dp.validation FROM deployments dp JOIN deployment_devices m ON m.deployment_id = dp.id
     WHERE dp.status IN ('scheduled', 'running', 'paused') AND dp.validation IS NOT NULL AND m.state = 'installed' AND m.validated IS NULL ORDER BY dp.id, m.position`,
  );

export function latestMembership(db: Database | Tx, deviceId: number, deploymentId?: number): { deployment_id: number; state: DeviceState; to_version: string | null; attempt: number } | undefined {
  if (deploymentId !== undefined) return db.get("SELECT deployment_id, state, to_version, attempt FROM deployment_devices WHERE device_id = ? AND deployment_id = ?", [deviceId, deploymentId]);
  return db.get("SELECT deployment_id, state, to_version, attempt FROM deployment_devices WHERE device_id = ? ORDER BY deployment_id DESC LIMIT 1", [deviceId]);
}

export const attemptHistoryId = (db: Database | Tx, deviceId: number, deploymentId: number, attempt: number): number | undefined =>
  db.get<{ id: number }>("SELECT id FROM update_history WHERE device_id = ? AND deployment_id = ? AND attempt = ? ORDER BY id DESC LIMIT 1", [deviceId, deploymentId, attempt])?.id;

export const historyEntryExists = (db: Database | Tx, id: number): boolean => db.get("SELECT 1 AS x FROM update_history WHERE id = ?", [id]) !== undefined;

export const validationCopy = (db: Database | Tx, id: number): string | null =>
  db.get<{ copy: string | null }>("SELECT validation_copy AS copy FROM deployments WHERE id = ?", [id])?.copy ?? null;

export const pinValidation = (tx: Tx, id: number, copy: string): void => void tx.run("UPDATE deployments SET validation_copy = ? WHERE id = ?", [copy, id]);
