/*
 * The action log's SQL: rows keyed by MAC, a status of pending -> sent -> success | error, the exit
 * code, and the output (small ones in the row, larger ones as a file named by `output_key`).
 *
 * Writes that arrive in one event-loop turn share one transaction: an action sent to ten thousand
 * devices is logged by one durable write, and the results that come back together are recorded
 * together (the journal's group commit then shares the fsync as well). Every promise still
 * resolves only once its own row is on disk.
 */
import { Kysely } from "kysely";
import type { Database, Tx } from "../../db/index.ts";
import type { Tx as StoreTx } from "../../db/store.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { deviceIdByMac } from "../devices/devices.ts";
import { isoTime, type Clock } from "../../util/time.ts";

export type ActionStatus = "pending" | "sent" | "success" | "error";
/** Statuses a row never leaves. */
export const FINAL = "('success', 'error')";
/** Outputs up to this size are stored in the log row; larger ones are files (DeviceFileStore). */
export const INLINE_OUTPUT_BYTES = 1024;

export interface LogRow {
  seq: number;
  id: string;
  mac_address: string;
  action_id: string;
  created: string;
  status: ActionStatus;
  status_code: number | null;
  output_key: string | null;
  /** The whole output when it is small (INLINE_OUTPUT_BYTES), else null. */
  output: Uint8Array | null;
  finished: string | null;
}

export interface NewEntry {
  id: string;
  mac: string;
  actionId: string;
  /** Stored only while its device has fewer rows without a result than this (update_server.max_queued_actions). */
  cap: number;
  /** On the first entry of a request: its audit entry (`action.exec`), written with the rows. */
  audit?: { actor: Actor; devices: string[] };
}

export interface ResultRecord {
  id: string;
  mac: string;
  code: number;
  /** Stored in the row (small output), or null when the output is a file or empty. */
  output: Uint8Array | null;
  /** The output's file, when it was too large for the row. */
  key: string | null;
}

/** What became of a result: recorded, too late (the row already had a final status), or no such row. */
export type Recorded = "stored" | "late" | "unknown";

/** Who waits for some of a batch's items: `count` items from `from` (one: its result, else the list). */
interface BatchWaiter<R> {
  from: number;
  count: number;
  one: boolean;
  resolve: (results: R | R[]) => void;
  reject: (error: unknown) => void;
}

/** Items added in one event-loop turn, committed by one call just after it (setImmediate). */
class TurnBatch<T, R> {
  private items: T[] = [];
  private waiters: Array<BatchWaiter<R>> = [];
  private readonly commit: (items: T[]) => Promise<R[]>;

  constructor(commit: (items: T[]) => Promise<R[]>) {
    this.commit = commit;
  }

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.enlist(1, true, resolve as (results: R | R[]) => void, reject);
      this.items.push(item);
    });
  }

  /** Many items, one promise for their results (a fan-out's rows: not one promise per device). */
  addAll(items: T[]): Promise<R[]> {
    return new Promise<R[]>((resolve, reject) => {
      this.enlist(items.length, false, resolve as (results: R | R[]) => void, reject);
      for (const item of items) this.items.push(item);
    });
  }

  private enlist(count: number, one: boolean, resolve: (results: R | R[]) => void, reject: (error: unknown) => void): void {
    if (this.waiters.length === 0) setImmediate(() => this.flush());
    this.waiters.push({ from: this.items.length, count, one, resolve, reject });
  }

  private flush(): void {
    const { items, waiters } = this;
    this.items = [];
    this.waiters = [];
    this.commit(items).then(
      (results) => {
        for (const w of waiters) w.resolve(w.one ? results[w.from] : results.slice(w.from, w.from + w.count));
      },
      (error: unknown) => {
        for (const w of waiters) w.reject(error);
      },
    );
  }
}

/** Rows of one multi-row INSERT: one statement text (and one journal op) per 64 log entries. */
const INSERT_CHUNK = 64;
const insertSql = (rows: number) =>
  `INSERT INTO action_log (id, mac_address, action_id, created, status) VALUES ${Array.from({ length: rows }, () => "(?, ?, ?, ?, 'pending')").join(", ")}`;

export class ActionLogStore {
  private readonly db: Database;
  private readonly clock: Clock;
  private readonly warn: (message: string) => void;
  private readonly inserts = new TurnBatch<NewEntry, boolean>((entries) => this.db.write((tx) => this.insertRows(tx, entries)));
  private readonly failures = new TurnBatch<string, void>((ids) => this.db.write((tx) => this.failRows(tx, ids)).then(() => ids.map(() => undefined)));
  private readonly results = new TurnBatch<ResultRecord, Recorded>((records) =>
    this.db.write((tx) => {
      const finished = isoTime(this.clock.now());
      return records.map((r) => this.resultRow(tx, r, finished));
    }),
  );
  private sent = new Set<string>();
  private sentFlush = false;

  constructor(db: Database, clock: Clock, warn: (message: string) => void) {
    this.db = db;
    this.clock = clock;
    this.warn = warn;
  }

  /**
   * New `pending` rows (in this order, so the queue keeps it); resolves once they are on disk, with
   * per entry whether it was stored: not when its device already has `cap` rows without a result
   * (counted in the writing transaction, so requests sent together cannot go past it).
   */
  insertPending(entries: NewEntry[]): Promise<boolean[]> {
    return entries.length === 0 ? Promise.resolve([]) : this.inserts.addAll(entries);
  }

  private insertRows(tx: Tx, entries: NewEntry[]): boolean[] {
    const waiting = this.unfinishedCounts([...new Set(entries.map((e) => e.mac))], tx);
    const stored = entries.map((e) => {
      const n = waiting.get(e.mac) ?? 0;
      if (n >= e.cap) return false;
      waiting.set(e.mac, n + 1);
      return true;
    });
    const rows = entries.filter((_e, i) => stored[i]);
    const created = isoTime(this.clock.now());
    const params = (chunk: NewEntry[]) => chunk.flatMap((e) => [e.id, e.mac, e.actionId, created]);
    let at = 0;
    for (; at + INSERT_CHUNK <= rows.length; at += INSERT_CHUNK) tx.run(insertSql(INSERT_CHUNK), params(rows.slice(at, at + INSERT_CHUNK)));
    // The rest one by one: few distinct statement texts, each prepared once.
    for (; at < rows.length; at++) tx.run(insertSql(1), params([rows[at]]));
    for (const { audit, actionId } of entries) {
      if (!audit) continue;
      const target = audit.devices.length === 1 ? deviceTarget(tx, audit.devices[0]) : "devices";
      recordAudit(tx, audit.actor, "action.exec", target, { action_id: actionId, devices: audit.devices.length, ...(audit.devices.length > 1 ? { first: audit.devices.slice(0, 10) } : {}) });
    }
    return stored;
  }

  /**
   * The device took the action (`ok`): `sent`, an intermediate state nobody waits for, so it
   * rides on the next durable commit (one lazy transaction for all marked in a turn).
   */
  markSent(id: string): void {
    this.sent.add(id);
    if (this.sentFlush) return;
    this.sentFlush = true;
    setImmediate(() => this.flushSent());
  }

  private flushSent(): void {
    const ids = [...this.sent];
    this.sent = new Set();
    this.sentFlush = false;
    if (ids.length === 0) return;
    try {
      this.db.writeLazy((tx) => {
        for (const id of ids) tx.run("UPDATE action_log SET status = 'sent' WHERE id = ? AND status = 'pending'", [id]);
      });
    } catch (error) {
      this.warn(`status sent of ${ids.length} action(s) not recorded: ${(error as Error).message}`);
    }
  }

  /** Marks a row `error` unless it already holds a final status; resolves once that is on disk. */
  fail(id: string): Promise<void> {
    return this.failures.add(id);
  }

  private failRows(tx: Tx, ids: string[]): void {
    const finished = isoTime(this.clock.now());
    for (const id of ids) tx.run(`UPDATE action_log SET status = 'error', finished = ? WHERE id = ? AND status NOT IN ${FINAL}`, [finished, id]);
  }

  /** A device's result: the row gets its final status, exit code and output, unless it already has one. */
  recordResult(record: ResultRecord): Promise<Recorded> {
    // A `sent` mark still waiting for its lazy write says nothing the result does not.
    this.sent.delete(record.id);
    return this.results.add(record);
  }

  private resultRow(tx: Tx, r: ResultRecord, finished: string): Recorded {
    const { changes } = tx.run(`UPDATE action_log SET status = ?, status_code = ?, output_key = ?, output = ?, finished = ? WHERE id = ? AND mac_address = ? AND status NOT IN ${FINAL}`, [
      r.code === 0 ? "success" : "error",
      r.code,
      r.key,
      r.output,
      finished,
      r.id,
      r.mac,
    ]);
    if (changes > 0) return "stored";
    return tx.get("SELECT 1 FROM action_log WHERE id = ? AND mac_address = ?", [r.id, r.mac]) ? "late" : "unknown";
  }

  /** Rows without a result per device of `macs` (devices without any are left out), in one query. */
  private unfinishedCounts(macs: readonly string[], tx: Tx): Map<string, number> {
    const rows = tx.all<{ mac: string; n: number }>(
      "SELECT mac_address AS mac, COUNT(*) AS n FROM action_log WHERE status IN ('pending', 'sent') AND mac_address IN (SELECT value FROM json_each(?)) GROUP BY mac_address",
      [JSON.stringify(macs)],
    );
    return new Map(rows.map((r) => [r.mac, r.n]));
  }

  /** Rows of a device without a result (its queue), oldest first. */
  queued(mac: string): LogRow[] {
    return this.db.all<LogRow>("SELECT * FROM action_log WHERE mac_address = ? AND status IN ('pending', 'sent') ORDER BY seq", [mac]);
  }

  /** The log of a device, newest first. */
  entries(mac: string): LogRow[] {
    return this.db.all<LogRow>("SELECT * FROM action_log WHERE mac_address = ? ORDER BY seq DESC", [mac]);
  }

  /** The output stored in the row of `id`, and when it came; undefined when the row keeps none. */
  inlineOutput(id: string): { data: Uint8Array; modified: Date } | undefined {
    const row = this.db.get<{ output: Uint8Array; finished: string }>("SELECT output, finished FROM action_log WHERE id = ? AND output IS NOT NULL", [id]);
    return row && { data: row.output, modified: new Date(row.finished) };
  }

  /** Deletes the finished rows (success or error) of a device; resolves with the output files they named. */
  clearFinished(mac: string, actor: Actor): Promise<Array<string | null>> {
    return this.deleteWhere(`mac_address = ? AND status IN ${FINAL}`, [mac], actor, "action.clear_log", mac);
  }

  /** Deletes the rows of a device without a result (its queue). */
  clearPending(mac: string, actor: Actor): Promise<Array<string | null>> {
    return this.deleteWhere(`mac_address = ? AND status NOT IN ${FINAL}`, [mac], actor, "action.clear_pending", mac);
  }

  /** Deletes the listed rows of a device, whatever their status; unknown ids are ignored. */
  remove(mac: string, ids: string[], actor: Actor): Promise<Array<string | null>> {
    if (ids.length === 0) return Promise.resolve([]);
    return this.deleteWhere(`mac_address = ? AND id IN (${ids.map(() => "?").join(", ")})`, [mac, ...ids], actor, "action.remove", mac, { ids: ids.slice(0, 20) });
  }

  /** Deletes the matching rows of device `mac` and records `action` with how many went. */
  private deleteWhere(where: string, params: string[], actor: Actor, action: string, mac: string, detail: Record<string, unknown> = {}): Promise<Array<string | null>> {
    return this.db.write((tx) => {
      const keys = deleteRows(tx, where, params);
      recordAudit(tx, actor, action, deviceTarget(tx, mac), { ...detail, removed: keys.length });
      return keys;
    });
  }
}

/** An action's device as the audit log names devices (`device:<id>`: its page lists them), or its MAC address when it is gone. */
function deviceTarget(tx: Tx, mac: string): string {
  const deviceId = deviceIdByMac(tx, mac);
  return deviceId !== undefined ? `device:${deviceId}` : `mac:${mac}`;
}

function deleteRows(tx: Tx, where: string, params: string[]): Array<string | null> {
  const outputs = tx.all<{ output_key: string | null }>(`SELECT output_key FROM action_log WHERE ${where}`, params);
  tx.run(`DELETE FROM action_log WHERE ${where}`, params);
  return outputs.map((r) => r.output_key);
}

/** Inside a device's deletion: its whole log goes; returns the output files to remove afterwards. */
export function deleteDeviceLog(tx: StoreTx, mac: string): Promise<Array<string | null>>;
export function deleteDeviceLog(tx: Tx, mac: string): Array<string | null>;
export function deleteDeviceLog(tx: Tx | StoreTx, mac: string): Promise<Array<string | null>> | Array<string | null> {
  if (!(tx instanceof Kysely)) return deleteRows(tx, "mac_address = ?", [mac]);
  return tx.deleteFrom("action_log").where("mac_address", "=", mac).returning("output_key").execute().then((rows) => rows.map((r) => r.output_key));
}
