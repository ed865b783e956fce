import type { Queries, Store, Tx } from "../../db/store.ts";
import type { DeviceFilter } from "../devices/devices.ts";
import { sql, type Selectable } from "kysely";
import { prepared } from "../../db/prepared.ts";
import type { ProgressTable } from "../../db/schema.ts";
import { dateOf, isoTime, rfc822, type Clock } from "../../util/time.ts";
import type { Progress } from "./schema.ts";

/** Update progress record: one per updating device; `updated` is the time of the latest update check offer or progress report (ISO), the idle clock. */
export type ProgressRow = Omit<Selectable<ProgressTable>, "updated"> & { updated: string };

const COLUMNS = ["device_id", "mac_address", "created", "version", "progress", "updated"] as const;

export const toView = (row: ProgressRow): Progress => ({
  id: row.device_id,
  mac_address: row.mac_address,
  created: rfc822(new Date(row.created)),
  version: row.version,
  progress: row.progress,
});

const recordOf = prepared((q: Queries, deviceId: number) => q.selectFrom("progress").select(COLUMNS).where("device_id", "=", deviceId));
const recordTouchedOf = prepared((q: Queries, deviceId: number, notBefore: string) => q.selectFrom("progress").select(COLUMNS).where("device_id", "=", deviceId).where("updated", ">=", notBefore));

/** The record of a device; with `notBefore`, only when it was touched at or after that time. */
export async function getProgress(q: Queries, deviceId: number, notBefore?: string): Promise<ProgressRow | undefined> {
  const { rows } = notBefore === undefined ? await recordOf(q, deviceId) : await recordTouchedOf(q, deviceId, notBefore);
  return rows[0] as ProgressRow | undefined;
}

/** Records (joined to devices as `d`) touched at or after `notBefore`, optionally narrowed by a device filter (a permission filter). */
export async function listProgress(q: Queries, notBefore: string, where?: DeviceFilter): Promise<ProgressRow[]> {
  return q
    .selectFrom("progress as pr")
    .innerJoin("devices as d", "d.id", "pr.device_id")
    .select(COLUMNS.map((c) => `pr.${c}` as const))
    .where("pr.updated", ">=", notBefore)
    .$if(where !== undefined, (qb) => qb.where(where!))
    .orderBy("pr.device_id")
    .execute() as Promise<ProgressRow[]>;
}

const deleteRecord = prepared((q: Queries, deviceId: number) => q.deleteFrom("progress").where("device_id", "=", deviceId));

/** Removes a device's record, in `tx` (the UpdateProgress that answers update checks must then forget it too). */
export async function deleteProgressOf(tx: Tx, deviceId: number): Promise<void> {
  await deleteRecord(tx, deviceId);
}

/** A record starting at 0 for `version`; one already waiting at 0 for it since `cutoff` or later keeps its `created`. */
const upsertStart = prepared((q: Queries, deviceId: number, mac: string, version: string, at: string, cutoff: string) =>
  q
    .insertInto("progress")
    .values({ device_id: deviceId, mac_address: mac, created: at, version, progress: 0, updated: at })
    .onConflict((oc) =>
      oc.column("device_id").doUpdateSet((eb) => ({
        mac_address: eb.ref("excluded.mac_address"),
        created: sql<string>`CASE WHEN progress.version = excluded.version AND progress.progress = 0 AND progress.updated >= ${cutoff} THEN progress.created ELSE excluded.created END`,
        version: eb.ref("excluded.version"),
        progress: 0,
        updated: eb.ref("excluded.updated"),
      })),
    ),
);

/**
 * The progress records' behaviour over time: the idle time after which a record no longer counts
 * (`update_server.progress_idle_timeout`), and the devices whose record is
 * known to wait at 0 for a version since a given time (saves the update check a SELECT and a
 * write). A record removed by the cascade of a device deletion leaves a stale entry, which is
 * harmless: device ids are never reused and a deleted device's token is refused.
 */
export class UpdateProgress {
  readonly idleMs: number;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly waitingAtZero = new Map<number, { version: string; since: number }>();

  constructor(store: Store, idleSeconds: number, clock: Clock) {
    this.store = store;
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
    const nowMs = now.getTime();
    const seenRecently = (since: number) => nowMs - since < this.idleMs / 2;
    const waiting = this.waitingAtZero.get(deviceId);
    if (waiting && waiting.version === version && seenRecently(waiting.since)) return;
    const current = await getProgress(this.store.query, deviceId);
    if (current && current.version === version && current.progress === 0 && seenRecently(Date.parse(current.updated))) {
      return void this.waitingAtZero.set(deviceId, { version, since: Date.parse(current.updated) });
    }
    await this.store.transact((tx) => this.startIn(tx, deviceId, mac, version, now));
    this.started(deviceId, version, nowMs);
  }

  /**
   * The same start, written in `tx` (the transaction that records a deployment's offer); the caller
   * tells `started` once it committed. A record already waiting at 0 for the version keeps its
   * `created`, decided in the statement itself.
   */
  async startIn(tx: Tx, deviceId: number, mac: string, version: string, now: Date): Promise<void> {
    await upsertStart(tx, deviceId, mac, version, isoTime(now), this.idleCutoff(now.getTime()));
  }

  /** A start written by `startIn` committed: checks of the device for that version need no write for a while. */
  started(deviceId: number, version: string, nowMs: number): void {
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
    return this.store.transact(async (tx) => {
      if (!(await getProgress(tx, deviceId, cutoff))) return false;
      if (value >= 100) await deleteProgressOf(tx, deviceId);
      else await tx.updateTable("progress").set({ progress: value, updated: isoTime(now) }).where("device_id", "=", deviceId).execute();
      return true;
    });
  }

  /** The device's update ended (an outcome, or its attempt timed out): its record goes, in `tx`. */
  endIn(tx: Tx, deviceId: number): Promise<void> {
    this.waitingAtZero.delete(deviceId);
    return deleteProgressOf(tx, deviceId);
  }

  /** Call after removing a device's record by other means (e.g. the device reported its new version). */
  forgetWaiting(deviceId: number): void {
    this.waitingAtZero.delete(deviceId);
  }

  /** Removes idle records (createUpdateDomain runs it now and then). Reads hide idle records at once, whenever it runs. */
  async sweep(): Promise<void> {
    const cutoff = this.idleCutoff();
    if (!(await this.store.query.selectFrom("progress").select("device_id").where("updated", "<", cutoff).limit(1).executeTakeFirst())) return;
    const removed = await this.store.transact(async (tx) => {
      const rows = await tx.deleteFrom("progress").where("updated", "<", cutoff).returning("device_id").execute();
      return rows.map((r) => r.device_id);
    });
    for (const id of removed) this.waitingAtZero.delete(id);
  }
}
