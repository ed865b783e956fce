/*
 * The action log's SQL: rows keyed by MAC, a status of pending -> sent -> success | error, the exit
 * code, and the output (small ones in the row, larger ones as a file named by `output_key`).
 *
 * Writes that arrive in one event-loop turn share one transaction: an action sent to ten thousand
 * devices is logged by one durable write, and the results that come back together are recorded
 * together (the journal's group commit then shares the fsync as well). Every promise still
 * resolves only once its own row is on disk.
 */
import type { Selectable } from "kysely";
import type { ActionLogTable } from "../../db/schema.ts";
import type { Store, Tx } from "../../db/store.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { deviceIdByMac } from "../devices/devices.ts";
import { isoTime, type Clock } from "../../util/time.ts";

export type ActionStatus = "pending" | "sent" | "success" | "error";
/** Statuses a row never leaves. */
const FINAL: ActionStatus[] = ["success", "error"];
/** Outputs up to this size are stored in the log row; larger ones are files (DeviceFileStore). */
export const INLINE_OUTPUT_BYTES = 1024;

/** A log row; `output` is the whole output when it is small (INLINE_OUTPUT_BYTES), else null. */
export type LogRow = Omit<Selectable<ActionLogTable>, "status"> & { status: ActionStatus };

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

/** Rows of one multi-row INSERT: one statement (and one journal op) per 64 log entries. */
const INSERT_CHUNK = 64;
/** Results of one UPDATE (two parameters each: within either engine's bound on a statement's parameters). */
const RESULT_CHUNK = 500;

export class ActionLogStore {
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly warn: (message: string) => void;
  private readonly inserts = new TurnBatch<NewEntry, boolean>((entries) => this.store.transact((tx) => this.insertRows(tx, entries)));
  private readonly failures = new TurnBatch<string, void>((ids) => this.store.transact((tx) => this.failRows(tx, ids)).then(() => ids.map(() => undefined)));
  private readonly results = new TurnBatch<ResultRecord, Recorded>((records) =>
    this.store.transact(async (tx) => {
      const finished = isoTime(this.clock.now());
      const recorded = new Map<ResultRecord, Recorded>();
      // A fan-out's results are mostly alike (same code, same short output): one statement for each kind.
      const alike = new Map<string, ResultRecord[]>();
      const seen = new Set<string>();
      const again: ResultRecord[] = [];
      for (const r of records) {
        // The same execution twice in one batch: the later one after the rest, as it came (late).
        if (seen.has(r.id)) {
          again.push(r);
          continue;
        }
        seen.add(r.id);
        const kind = `${r.code}\n${r.key ?? ""}\n${r.output ? Buffer.from(r.output).toString("base64") : ""}`;
        alike.set(kind, [...(alike.get(kind) ?? []), r]);
      }
      for (const group of alike.values()) {
        if (group.length === 1) {
          recorded.set(group[0], await this.resultRow(tx, group[0], finished));
          continue;
        }
        for (let at = 0; at < group.length; at += RESULT_CHUNK) {
          const chunk = group.slice(at, at + RESULT_CHUNK);
          for (const [r, outcome] of await this.resultRows(tx, chunk, finished)) recorded.set(r, outcome);
        }
      }
      for (const r of again) recorded.set(r, await this.resultRow(tx, r, finished));
      return records.map((r) => recorded.get(r)!);
    }),
  );
  private sent = new Set<string>();
  private sentFlush = false;

  constructor(store: Store, clock: Clock, warn: (message: string) => void) {
    this.store = store;
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

  private async insertRows(tx: Tx, entries: NewEntry[]): Promise<boolean[]> {
    const waiting = await this.unfinishedCounts([...new Set(entries.map((e) => e.mac))], tx);
    const stored = entries.map((e) => {
      const n = waiting.get(e.mac) ?? 0;
      if (n >= e.cap) return false;
      waiting.set(e.mac, n + 1);
      return true;
    });
    const rows = entries.filter((_e, i) => stored[i]);
    const created = isoTime(this.clock.now());
    const values = (chunk: NewEntry[]) => chunk.map((e) => ({ id: e.id, mac_address: e.mac, action_id: e.actionId, created, status: "pending" }));
    let at = 0;
    for (; at + INSERT_CHUNK <= rows.length; at += INSERT_CHUNK) await tx.insertInto("action_log").values(values(rows.slice(at, at + INSERT_CHUNK))).execute();
    // The rest one by one: few distinct statement texts, each prepared once.
    for (; at < rows.length; at++) await tx.insertInto("action_log").values(values([rows[at]])).execute();
    for (const { audit, actionId } of entries) {
      if (!audit) continue;
      const target = audit.devices.length === 1 ? await deviceTarget(tx, audit.devices[0]) : "devices";
      await recordAudit(tx, audit.actor, "action.exec", target, { action_id: actionId, devices: audit.devices.length, ...(audit.devices.length > 1 ? { first: audit.devices.slice(0, 10) } : {}) });
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
      this.store.writeLazy(this.store.query.updateTable("action_log").set({ status: "sent" }).where("id", "in", ids).where("status", "=", "pending"));
    } catch (error) {
      this.warn(`status sent of ${ids.length} action(s) not recorded: ${(error as Error).message}`);
    }
  }

  /** Marks a row `error` unless it already holds a final status; resolves once that is on disk. */
  fail(id: string): Promise<void> {
    return this.failures.add(id);
  }

  private async failRows(tx: Tx, ids: string[]): Promise<void> {
    const finished = isoTime(this.clock.now());
    await tx.updateTable("action_log").set({ status: "error", finished }).where("id", "in", ids).where("status", "not in", FINAL).execute();
  }

  /** A device's result: the row gets its final status, exit code and output, unless it already has one. */
  recordResult(record: ResultRecord): Promise<Recorded> {
    // A `sent` mark still waiting for its lazy write says nothing the result does not.
    this.sent.delete(record.id);
    return this.results.add(record);
  }

  private async resultRow(tx: Tx, r: ResultRecord, finished: string): Promise<Recorded> {
    const { numUpdatedRows } = await tx
      .updateTable("action_log")
      .set({ status: r.code === 0 ? "success" : "error", status_code: r.code, output_key: r.key, output: r.output, finished })
      .where("id", "=", r.id)
      .where("mac_address", "=", r.mac)
      .where("status", "not in", FINAL)
      .executeTakeFirst();
    if (numUpdatedRows > 0n) return "stored";
    return (await tx.selectFrom("action_log").select("seq").where("id", "=", r.id).where("mac_address", "=", r.mac).executeTakeFirst()) ? "late" : "unknown";
  }

  /** Results alike but for their execution (one code, key and output): one UPDATE, and one look-up for those it did not change. */
  private async resultRows(tx: Tx, group: ResultRecord[], finished: string): Promise<Map<ResultRecord, Recorded>> {
    const { code, key, output } = group[0];
    const updated = await tx
      .updateTable("action_log")
      .set({ status: code === 0 ? "success" : "error", status_code: code, output_key: key, output, finished })
      .where((eb) => eb(eb.refTuple("id", "mac_address"), "in", group.map((r) => eb.tuple(r.id, r.mac))))
      .where("status", "not in", FINAL)
      .returning("id")
      .execute();
    const stored = new Set(updated.map((row) => row.id));
    const rest = group.filter((r) => !stored.has(r.id));
    const known = rest.length === 0 ? new Set<string>() : new Set((await tx.selectFrom("action_log").select("id").where((eb) => eb(eb.refTuple("id", "mac_address"), "in", rest.map((r) => eb.tuple(r.id, r.mac)))).execute()).map((row) => row.id));
    return new Map(group.map((r) => [r, stored.has(r.id) ? "stored" : known.has(r.id) ? "late" : "unknown"]));
  }

  /** Rows without a result per device of `macs` (devices without any are left out), in one query. */
  private async unfinishedCounts(macs: readonly string[], tx: Tx): Promise<Map<string, number>> {
    if (macs.length === 0) return new Map();
    const rows = await tx
      .selectFrom("action_log")
      .select(["mac_address", (eb) => eb.fn.countAll<number>().as("n")])
      .where("status", "in", ["pending", "sent"])
      .where("mac_address", "in", [...macs])
      .groupBy("mac_address")
      .execute();
    return new Map(rows.map((r) => [r.mac_address, Number(r.n)]));
  }

  /** Rows of a device without a result (its queue), oldest first. */
  queued(mac: string): Promise<LogRow[]> {
    return this.store.query.selectFrom("action_log").selectAll().where("mac_address", "=", mac).where("status", "in", ["pending", "sent"]).orderBy("seq").$castTo<LogRow>().execute();
  }

  /** The log of a device, newest first. */
  entries(mac: string): Promise<LogRow[]> {
    return this.store.query.selectFrom("action_log").selectAll().where("mac_address", "=", mac).orderBy("seq", "desc").$castTo<LogRow>().execute();
  }

  /** The output stored in the row of `id`, and when it came; undefined when the row keeps none. */
  async inlineOutput(id: string): Promise<{ data: Uint8Array; modified: Date } | undefined> {
    const row = await this.store.query.selectFrom("action_log").select(["output", "finished"]).where("id", "=", id).where("output", "is not", null).executeTakeFirst();
    return row?.output ? { data: row.output, modified: new Date(row.finished!) } : undefined;
  }

  /** Deletes the finished rows (success or error) of a device; resolves with the output files they named. */
  clearFinished(mac: string, actor: Actor): Promise<Array<string | null>> {
    return this.deleteWhere({ mac, status: "final" }, actor, "action.clear_log");
  }

  /** Deletes the rows of a device without a result (its queue). */
  clearPending(mac: string, actor: Actor): Promise<Array<string | null>> {
    return this.deleteWhere({ mac, status: "unfinished" }, actor, "action.clear_pending");
  }

  /** Deletes the listed rows of a device, whatever their status; unknown ids are ignored. */
  remove(mac: string, ids: string[], actor: Actor): Promise<Array<string | null>> {
    if (ids.length === 0) return Promise.resolve([]);
    return this.deleteWhere({ mac, ids }, actor, "action.remove", { ids: ids.slice(0, 20) });
  }

  /** Deletes the matching rows of a device and records `action` with how many went. */
  private deleteWhere(which: Which, actor: Actor, action: string, detail: Record<string, unknown> = {}): Promise<Array<string | null>> {
    return this.store.transact(async (tx) => {
      const keys = await deleteRows(tx, which);
      await recordAudit(tx, actor, action, await deviceTarget(tx, which.mac), { ...detail, removed: keys.length });
      return keys;
    });
  }
}

/** An action's device as the audit log names devices (`device:<id>`: its page lists them), or its MAC address when it is gone. */
async function deviceTarget(tx: Tx, mac: string): Promise<string> {
  const deviceId = await deviceIdByMac(tx, mac);
  return deviceId !== undefined ? `device:${deviceId}` : `mac:${mac}`;
}

/** Rows of a device: all, those with a final status, those without one, or the listed ones. */
type Which = { mac: string; status?: "final" | "unfinished"; ids?: string[] };

async function deleteRows(tx: Tx, { mac, status, ids }: Which): Promise<Array<string | null>> {
  const rows = await tx
    .deleteFrom("action_log")
    .where("mac_address", "=", mac)
    .$if(status === "final", (qb) => qb.where("status", "in", FINAL))
    .$if(status === "unfinished", (qb) => qb.where("status", "not in", FINAL))
    .$if(ids !== undefined, (qb) => qb.where("id", "in", ids!))
    .returning("output_key")
    .execute();
  return rows.map((r) => r.output_key);
}

/** Inside a device's deletion: its whole log goes; returns the output files to remove afterwards. */
export function deleteDeviceLog(tx: Tx, mac: string): Promise<Array<string | null>> {
  return deleteRows(tx, { mac });
}
