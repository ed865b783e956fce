import type { Database, Tx } from "../../db/index.ts";
import type { Queries, Tx as KyselyTx } from "../../db/store.ts";
import { dateOf, isoTime, rfc822, type Clock } from "../../util/time.ts";
import type { Progress } from "./schema.ts";

/** Update progress record: one per updating device. */
export interface ProgressRow {
  device_id: number;
  mac_address: string;
  created: string;
  version: string;
  progress: number;
  /** Time of the latest update check offer or progress report (ISO); the idle clock. */
  updated: string;
}

export const toView = (row: ProgressRow): Progress => ({
  id: row.device_id,
  mac_address: row.mac_address,
  created: rfc822(new Date(row.created)),
  version: row.version,
  progress: row.progress,
});

const COLUMNS = "pr.device_id, pr.mac_address, pr.created, pr.version, pr.progress, pr.updated";

/** The record of a device; with `notBefore`, only when it was touched at or after that time. */
export function getProgress(q: Queries, deviceId: number, notBefore?: string): Promise<ProgressRow | undefined>;
export function getProgress(db: Database | Tx, deviceId: number, notBefore?: string): ProgressRow | undefined;
export function getProgress(db: Queries | Database | Tx, deviceId: number, notBefore?: string): Promise<ProgressRow | undefined> | ProgressRow | undefined {
  if ("selectFrom" in db) {
    return db
      .selectFrom("progress")
      .select(["device_id", "mac_address", "created", "version", "progress", "updated"])
      .where("device_id", "=", deviceId)
      .$if(notBefore !== undefined, (qb) => qb.where("updated", ">=", notBefore!))
      .executeTakeFirst() as Promise<ProgressRow | undefined>;
  }
  if (notBefore === undefined) return db.get<ProgressRow>(`SELECT ${COLUMNS} FROM progress pr WHERE pr.device_id = ?`, [deviceId]);
  return db.get<ProgressRow>(`SELECT ${COLUMNS} FROM progress pr WHERE pr.device_id = ? AND pr.updated >= ?`, [deviceId, notBefore]);
}

/** Records (joined to devices as `d`) touched at or after `notBefore`, optionally narrowed by a device permission filter. */
export function listProgress(db: Database, notBefore: string, where?: { sql: string; params: (string | number)[] }): ProgressRow[] {
  return db.all<ProgressRow>(
    `SELECT ${COLUMNS} FROM progress pr JOIN devices d ON d.id = pr.device_id WHERE pr.updated >= ?${where ? ` AND ${where.sql}` : ""} ORDER BY pr.device_id`,
    [notBefore, ...(where?.params ?? [])],
  );
}

/** Removes a device's record, in `tx` (the UpdateProgress that answers update checks must then forget it too). */
export function deleteProgressOf(tx: Tx, deviceId: number): void {
  tx.run("DELETE FROM progress WHERE device_id = ?", [deviceId]);
}

/**
 * The progress records' behaviour over time: the idle time after which a record no longer counts
 * (`update_server.progress_idle_timeout`), and the devices whose record is
 * known to wait at 0 for a version since a given time (saves the update check a SELECT and a
 * write). A record removed by the cascade of a device deletion leaves a stale entry, which is
 * harmless: device ids are never reused and a deleted device's token is refused.
 */
export class UpdateProgress {
  readonly idleMs: number;
  private readonly db: Database;
  private readonly clock: Clock;
  private readonly waitingAtZero = new Map<number, { version: string; since: number }>();

  constructor(db: Database, idleSeconds: number, clock: Clock) {
    this.db = db;
    this.clock = clock;
    this.idleMs = idleSeconds * 1000;
  }

  /** Records last touched before this time (ISO) are idle: not shown, not updated, swept. */
  idleCutoff(now = this.clock.now()): string {
    return isoTime(now - this.idleMs);
  }

  /**
   * An update check offered `version`: the device's record starts again at 0 (upsert). A
   * record already waiting at 0 for the same version keeps its `created`; it is left
   * alone entirely while it is far from idle, so a device that checks again before it starts
   * costs no write.
   */
  async recordUpdateStart(deviceId: number, mac: string, version: string, now = dateOf(this.clock)): Promise<void> {
    const db = this.db;
    const nowMs = now.getTime();
    const seenRecently = (since: number) => nowMs - since < this.idleMs / 2;
    const waiting = this.waitingAtZero.get(deviceId);
    if (waiting && waiting.version === version && seenRecently(waiting.since)) return;
    const current = getProgress(db, deviceId);
    if (current && current.version === version && current.progress === 0 && seenRecently(Date.parse(current.updated))) {
      return void this.waitingAtZero.set(deviceId, { version, since: Date.parse(current.updated) });
    }
    const at = isoTime(now);
    const cutoff = this.idleCutoff(nowMs);
    await db.write((tx) => {
      const row = getProgress(tx, deviceId);
      const keep = row !== undefined && row.version === version && row.progress === 0 && row.updated >= cutoff;
      tx.run(
        `INSERT INTO progress (device_id, mac_address, created, version, progress, updated) VALUES (?, ?, ?, ?, 0, ?)
         ON CONFLICT(device_id) DO UPDATE SET mac_address = excluded.mac_address, created = excluded.created, version = excluded.version,
           progress = 0, updated = excluded.updated`,
        [deviceId, mac, keep ? row.created : at, version, at],
      );
    });
    this.waitingAtZero.set(deviceId, { version, since: nowMs });
  }

  /**
   * A progress report from the device (over the device channel): clamped to 0..100; 100 means
   * done and removes the record. False when the device has no record (or only an idle one).
   */
  async reportProgress(deviceId: number, progress: number, now = dateOf(this.clock)): Promise<boolean> {
    const value = Math.max(0, Math.min(100, Math.round(progress)));
    this.forgetWaiting(deviceId);
    const cutoff = this.idleCutoff(now.getTime());
    return this.db.write((tx) => {
      if (!getProgress(tx, deviceId, cutoff)) return false;
      if (value >= 100) deleteProgressOf(tx, deviceId);
      else tx.run("UPDATE progress SET progress = ?, updated = ? WHERE device_id = ?", [value, isoTime(now), deviceId]);
      return true;
    });
  }

  /** The device's update ended (an outcome, or its attempt timed out): its record goes, in `tx`. */
  endIn(tx: KyselyTx, deviceId: number): Promise<void>;
  /** The same in a synchronous transaction of an area not yet on the Store (goes once none calls it). */
  endIn(tx: Tx, deviceId: number): void;
  endIn(tx: KyselyTx | Tx, deviceId: number): Promise<void> | void {
    this.waitingAtZero.delete(deviceId);
    if ("run" in tx) return void deleteProgressOf(tx, deviceId);
    return tx.deleteFrom("progress").where("device_id", "=", deviceId).execute().then(() => {});
  }

  /** Call after removing a device's record by other means (e.g. the device reported its new version). */
  forgetWaiting(deviceId: number): void {
    this.waitingAtZero.delete(deviceId);
  }

  /** Removes idle records (createUpdateDomain runs it now and then). Reads hide idle records at once, whenever it runs. */
  async sweep(): Promise<void> {
    const cutoff = this.idleCutoff();
    if (!this.db.get("SELECT 1 AS x FROM progress WHERE updated < ? LIMIT 1", [cutoff])) return;
    const removed = await this.db.write((tx) => {
      const ids = tx.all<{ device_id: number }>("SELECT device_id FROM progress WHERE updated < ?", [cutoff]).map((r) => r.device_id);
      tx.run("DELETE FROM progress WHERE updated < ?", [cutoff]);
      return ids;
    });
    for (const id of removed) this.waitingAtZero.delete(id);
  }
}
