/*
 * Device logs (docs/update-server.md, "Device logs"): telemetry entries a device sends in
 * batches, read and deleted by managers per device, per group or one by one. Unlike the
 * reference, storage is bounded: an entry is at most MAX_ENTRY_BYTES of UTF-8 (413 beyond), a
 * batch at most `device_logs_max_batch` entries, a device keeps at most `device_logs_per_device`
 * entries and `device_log_bytes_per_device` bytes (a batch that goes over drops the device's
 * oldest entries in the same commit) and sends at most `device_logs_per_minute` entries (429
 * beyond). Lists are answered page by page: with `limit`/`offset` one page, without them every
 * entry, streamed a page at a time (memory for one page, other requests served in between).
 */
import { recordAudit, type Actor } from "../../audit/audit.ts";
import type { Database, SqlParam, Tx } from "../../db/index.ts";
import { LabgateError } from "../../util/errors.ts";
import { deviceExists } from "../devices/devices.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import type { SqlFilter } from "../permissions/permissions.ts";
import { MAX_ENTRY_BYTES, type Log, type LogInput } from "./schema.ts";

interface LogRow {
  id: number;
  created: string;
  device_id: number;
  device_timestamp: string;
  name: string;
  entry: string;
}

export interface LogFilter {
  since?: Date;
  to?: Date;
  name?: string;
}

export interface LogPage {
  limit?: number;
  offset?: number;
}

const toV1 = (row: LogRow): Log => ({
  id: row.id,
  created: rfc822(new Date(row.created)),
  device_id: row.device_id,
  device_timestamp: rfc822(new Date(row.device_timestamp)),
  name: row.name,
  entry: row.entry,
});

/** UTF-8 bytes of an entry, as the quota counts them. */
const entryBytes = (e: { name: string; entry: string }) => Buffer.byteLength(e.name) + Buffer.byteLength(e.entry);

/** 413 for the first entry longer than MAX_ENTRY_BYTES in UTF-8. */
export function checkEntrySizes(entries: readonly LogInput[]): void {
  const index = entries.findIndex((e) => Buffer.byteLength(e.entry) > MAX_ENTRY_BYTES);
  if (index >= 0) throw new LabgateError("too_large", `batch entry ${index}: "entry" is longer than ${MAX_ENTRY_BYTES} bytes (UTF-8)`);
}

export interface LogQuota {
  entries: number;
  bytes: number;
}

/**
 * Stores a batch for device `deviceId` in one durable commit and drops that device's oldest
 * entries beyond `quota` (entries and bytes). False when the device no longer exists.
 */
export function appendLogs(db: Database, deviceId: number, entries: LogInput[], quota: LogQuota, now: Date): Promise<boolean> {
  return db.write((tx) => {
    if (!deviceExists(tx, deviceId)) return false;
    for (const e of entries) {
      tx.run("INSERT INTO device_logs (device_id, created, device_timestamp, name, entry, bytes) VALUES (?, ?, ?, ?, ?, ?)", [
        deviceId,
        isoTime(now),
        isoTime(e.device_timestamp),
        e.name,
        e.entry,
        entryBytes(e),
      ]);
    }
    tx.run("DELETE FROM device_logs WHERE device_id = ? AND id <= (SELECT id FROM device_logs WHERE device_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)", [
      deviceId,
      deviceId,
      quota.entries,
    ]);
    // The newest entry whose running total (newest first) passes the byte quota, and all older, go.
    tx.run(
      `DELETE FROM device_logs WHERE device_id = ? AND id <= (
         SELECT id FROM (SELECT id, SUM(bytes) OVER (ORDER BY id DESC) AS total FROM device_logs WHERE device_id = ?) WHERE total > ? ORDER BY id DESC LIMIT 1)`,
      [deviceId, deviceId, quota.bytes],
    );
    return true;
  });
}

/**
 * Entries each device may send per minute: a bucket of `perMinute` that refills continuously. Memory:
 * one number pair per device that sent logs lately (a full bucket is forgotten).
 */
export class LogRate {
  private readonly buckets = new Map<number, { tokens: number; at: number }>();
  private readonly perMinute: () => number;
  private readonly now: () => number;

  constructor(perMinute: () => number, now: () => number) {
    this.perMinute = perMinute;
    this.now = now;
  }

  /** Seconds until the device may send one entry again, when its allowance is spent (checked before its body is read). */
  spent(deviceId: number): { retryAfter: number } | undefined {
    const rate = this.perMinute();
    const bucket = this.buckets.get(deviceId);
    if (!bucket) return undefined;
    const tokens = Math.min(rate, bucket.tokens + ((this.now() - bucket.at) * rate) / 60_000);
    return tokens >= 1 ? undefined : { retryAfter: Math.max(1, Math.ceil(((1 - tokens) * 60) / rate)) };
  }

  /** Takes `count` entries from the device's allowance; else (taking nothing) the seconds until they fit. */
  take(deviceId: number, count: number): { retryAfter: number } | undefined {
    const rate = this.perMinute();
    const now = this.now();
    const bucket = this.buckets.get(deviceId);
    const tokens = bucket ? Math.min(rate, bucket.tokens + ((now - bucket.at) * rate) / 60_000) : rate;
    if (count > tokens) return { retryAfter: Math.max(1, Math.ceil(((Math.min(count, rate) - tokens) * 60) / rate)) };
    this.buckets.set(deviceId, { tokens: tokens - count, at: now });
    if (this.buckets.size > 100_000) this.forgetFull(now, rate);
    return undefined;
  }

  private forgetFull(now: number, rate: number): void {
    for (const [id, bucket] of this.buckets) if (bucket.tokens + ((now - bucket.at) * rate) / 60_000 >= rate) this.buckets.delete(id);
  }
}

/** `devices d` rows whose logs a query covers, as an SQL condition on `d`. */
export type DeviceScope = SqlFilter;

const where = (devices: DeviceScope, filter: LogFilter): SqlFilter => {
  const parts = [`l.device_id IN (SELECT d.id FROM devices d WHERE ${devices.sql})`];
  const params = [...devices.params];
  if (filter.name !== undefined) parts.push("l.name = ?"), params.push(filter.name);
  if (filter.since) parts.push("l.device_timestamp >= ?"), params.push(isoTime(filter.since));
  if (filter.to) parts.push("l.device_timestamp <= ?"), params.push(isoTime(filter.to));
  return { sql: parts.join(" AND "), params };
};

const ORDER = "ORDER BY l.device_timestamp DESC, l.id DESC";
/** Entries per page of a streamed list (about 400 KiB of JSON at most). */
const STREAM_PAGE = 100;

/**
 * The rows of a page: the database orders and cuts the matching ids only (its sort carries ids,
 * not 4 KiB entries), then reads that page's rows.
 */
const pageRows = (db: Database, w: SqlFilter, extra: string, params: SqlParam[], limit: number, offset: number): LogRow[] =>
  db.all<LogRow>(`SELECT l.* FROM device_logs l WHERE l.id IN (SELECT l.id FROM device_logs l WHERE ${w.sql}${extra} ${ORDER} LIMIT ? OFFSET ?) ${ORDER}`, [
    ...w.params,
    ...params,
    limit,
    offset,
  ]);

/** How many entries of the devices in scope match `filter` (X-Total-Count). */
export function countLogs(db: Database, devices: DeviceScope, filter: LogFilter): number {
  const w = where(devices, filter);
  return db.get<{ n: number }>(`SELECT COUNT(*) AS n FROM device_logs l WHERE ${w.sql}`, w.params)!.n;
}

/** One page of the entries of the devices in scope matching `filter`, newest device timestamp first. */
export function queryLogs(db: Database, devices: DeviceScope, filter: LogFilter, page: LogPage): Log[] {
  return pageRows(db, where(devices, filter), "", [], page.limit ?? -1, page.offset ?? 0).map(toV1);
}

/**
 * Every matching entry, newest first, a page at a time: each page starts after the last one's
 * (device timestamp, id), so a page costs the same however deep into the list it is.
 */
export function* logPages(db: Database, devices: DeviceScope, filter: LogFilter): Generator<Log[]> {
  const w = where(devices, filter);
  let after: LogRow | undefined;
  for (;;) {
    const rows = after ? pageRows(db, w, " AND (l.device_timestamp, l.id) < (?, ?)", [after.device_timestamp, after.id], STREAM_PAGE, 0) : pageRows(db, w, "", [], STREAM_PAGE, 0);
    if (rows.length > 0) yield rows.map(toV1);
    if (rows.length < STREAM_PAGE) return;
    after = rows[rows.length - 1];
  }
}

/** Deletes the entries of the devices in scope matching `filter`; returns how many went. */
/** Deletes the entries of the devices in scope matching `filter`; `target` names the scope in the audit log (device:3, group:1). */
export function deleteLogs(db: Database, devices: DeviceScope, filter: LogFilter, actor: Actor, target: string): Promise<number> {
  const w = where(devices, filter);
  return db.write((tx) => {
    const removed = tx.run(`DELETE FROM device_logs AS l WHERE ${w.sql}`, w.params).changes;
    recordAudit(tx, actor, "log.delete", target, { ...filter, removed });
    return removed;
  });
}

export function getLog(db: Database | Tx, id: number): Log | undefined {
  const row = db.get<LogRow>("SELECT * FROM device_logs WHERE id = ?", [id]);
  return row && toV1(row);
}

export function deleteLog(db: Database, log: { id: number; device_id: number }, actor: Actor): Promise<boolean> {
  return db.write((tx) => {
    if (tx.run("DELETE FROM device_logs WHERE id = ?", [log.id]).changes === 0) return false;
    recordAudit(tx, actor, "log.delete", `device:${log.device_id}`, { log: log.id, removed: 1 });
    return true;
  });
}
