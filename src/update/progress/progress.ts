import type { Database, Tx } from "../../db/index.ts";
import { rfc822 } from "../../util/time.ts";

/** Update progress record (section 8): one per updating device. */
export interface ProgressRow {
  device_id: number;
  mac_address: string;
  created: string;
  version: string;
  progress: number;
}

export interface ProgressView {
  id: number;
  mac_address: string;
  created: string;
  version: string;
  progress: number;
}

export const toView = (row: ProgressRow): ProgressView => ({
  id: row.device_id,
  mac_address: row.mac_address,
  created: rfc822(new Date(row.created)),
  version: row.version,
  progress: row.progress,
});

export function getProgress(db: Database | Tx, deviceId: number): ProgressRow | undefined {
  return db.get<ProgressRow>("SELECT device_id, mac_address, created, version, progress FROM progress WHERE device_id = ?", [deviceId]);
}

/** Records (joined to devices as `d`), optionally narrowed by a device permission filter. */
export function listProgress(db: Database, where?: { sql: string; params: (string | number)[] }): ProgressRow[] {
  return db.all<ProgressRow>(
    `SELECT pr.device_id, pr.mac_address, pr.created, pr.version, pr.progress FROM progress pr JOIN devices d ON d.id = pr.device_id${where ? ` WHERE ${where.sql}` : ""} ORDER BY pr.device_id`,
    where?.params ?? [],
  );
}

/**
 * Devices whose record is known to wait at 0 for a version (saves the update check a SELECT).
 * A record removed by the cascade of a device deletion leaves a stale entry, which is harmless:
 * device ids are never reused and a deleted device's token is refused.
 */
const waitingAtZero = new WeakMap<Database, Map<number, string>>();
function waitingOf(db: Database): Map<number, string> {
  let map = waitingAtZero.get(db);
  if (!map) waitingAtZero.set(db, (map = new Map()));
  return map;
}

/**
 * An update check offered `version`: the device's record starts again at 0 (upsert, section 17
 * item 11). A record already waiting at 0 for the same version is left alone, so a device that
 * checks again before it starts costs no write.
 */
export async function recordUpdateStart(db: Database, deviceId: number, mac: string, version: string, now = new Date()): Promise<void> {
  const waiting = waitingOf(db);
  if (waiting.get(deviceId) === version) return;
  const current = getProgress(db, deviceId);
  if (current && current.version === version && current.progress === 0) return void waiting.set(deviceId, version);
  await db.write((tx) => {
    tx.run(
      `INSERT INTO progress (device_id, mac_address, created, version, progress) VALUES (?, ?, ?, ?, 0)
       ON CONFLICT(device_id) DO UPDATE SET mac_address = excluded.mac_address, created = excluded.created, version = excluded.version, progress = 0`,
      [deviceId, mac, now.toISOString(), version],
    );
  });
  waiting.set(deviceId, version);
}

/**
 * A progress report from the device (the device channel comes with a later issue): clamped to
 * 0..100; 100 means done and removes the record. False when the device has no record.
 */
export async function reportProgress(db: Database, deviceId: number, progress: number): Promise<boolean> {
  const value = Math.max(0, Math.min(100, Math.round(progress)));
  waitingOf(db).delete(deviceId);
  reportsOf(db).set(deviceId, Date.now());
  return db.write((tx) => {
    if (!getProgress(tx, deviceId)) return false;
    if (value >= 100) tx.run("DELETE FROM progress WHERE device_id = ?", [deviceId]);
    else tx.run("UPDATE progress SET progress = ? WHERE device_id = ?", [value, deviceId]);
    return true;
  });
}

/** When each device last reported progress (memory only: after a restart, age counts from `created`). */
const lastReports = new WeakMap<Database, Map<number, number>>();
function reportsOf(db: Database): Map<number, number> {
  let map = lastReports.get(db);
  if (!map) lastReports.set(db, (map = new Map()));
  return map;
}

/**
 * Removes records that saw neither a start nor a report for `idleSeconds` (17 item 11: a device
 * that failed or vanished mid-update leaves no record behind forever). Returns how many went.
 */
export async function removeIdleProgress(db: Database, idleSeconds: number, now = Date.now()): Promise<number> {
  const reports = reportsOf(db);
  const cutoff = now - idleSeconds * 1000;
  const idle = db
    .all<{ device_id: number; created: string }>("SELECT device_id, created FROM progress")
    .filter((row) => Math.max(Date.parse(row.created), reports.get(row.device_id) ?? 0) < cutoff);
  if (idle.length === 0) return 0;
  const removed = await db.write((tx) => {
    let count = 0;
    // `created` guards against a record that started again meanwhile.
    for (const row of idle) count += tx.run("DELETE FROM progress WHERE device_id = ? AND created = ?", [row.device_id, row.created]).changes;
    return count;
  });
  for (const row of idle) {
    waitingOf(db).delete(row.device_id);
    reports.delete(row.device_id);
  }
  return removed;
}
