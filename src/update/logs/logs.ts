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
import { sql, type Expression, type Selectable, type SqlBool } from "kysely";
import type { Identity } from "../../app/context.ts";
import type { Queries, Store } from "../../db/store.ts";
import type { DeviceLogsTable } from "../../db/schema.ts";
import { LabgateError } from "../../util/errors.ts";
import { countDevices, deviceExists } from "../devices/devices.ts";
import { GROUP_NOT_FOUND, getGroup, memberFilter } from "../groups/groups.ts";
import { allowed, authorize, MSG_FORBIDDEN, permissionFilter } from "../permissions/permissions.ts";
import type { Permission } from "../permissions/schema.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { MAX_ENTRY_BYTES, type Log, type LogInput } from "./schema.ts";

type LogRow = Selectable<DeviceLogsTable>;

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
export function appendLogs(store: Store, deviceId: number, entries: LogInput[], quota: LogQuota, now: Date): Promise<boolean> {
  return store.transact(async (tx) => {
    if (!(await deviceExists(tx, deviceId))) return false;
    if (entries.length > 0) {
      const created = isoTime(now);
      await tx
        .insertInto("device_logs")
        .values(entries.map((e) => ({ device_id: deviceId, created, device_timestamp: isoTime(e.device_timestamp), name: e.name, entry: e.entry, bytes: entryBytes(e) })))
        .execute();
    }
    await tx
      .deleteFrom("device_logs")
      .where("device_id", "=", deviceId)
      .where("id", "<=", (eb) => eb.selectFrom("device_logs").select("id").where("device_id", "=", deviceId).orderBy("id", "desc").limit(1).offset(quota.entries))
      .execute();
    // The newest entry whose running total (newest first) passes the byte quota, and all older, go.
    await sql`DELETE FROM device_logs WHERE device_id = ${deviceId} AND id <= (
         SELECT id FROM (SELECT id, SUM(bytes) OVER (ORDER BY id DESC) AS total FROM device_logs WHERE device_id = ${deviceId}) AS running WHERE total > ${quota.bytes} ORDER BY id DESC LIMIT 1)`.execute(tx);
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

/** `devices d` rows whose logs a query covers, as a condition on `d`. */
export type DeviceScope = Expression<SqlBool>;

/** The scope of one device. */
export const oneDevice = (id: number): DeviceScope => sql<SqlBool>`d.id = ${id}`;

/** The devices both scopes cover (the second absent: all of the first's). */
const bothScopes = (a: DeviceScope, b: DeviceScope | undefined): DeviceScope => (b ? sql<SqlBool>`(${a}) AND (${b})` : a);

const LOG_NOT_FOUND = "log does not exist";
const DEVICE_NOT_FOUND = "device does not exist";

/** One device's logs, once `identity` holds `perm` on it; a missing device is a 404 for admins too. */
export async function deviceLogScope(q: Queries, identity: Identity, deviceId: number, perm: Permission): Promise<DeviceScope> {
  await authorize(q, identity, "device", deviceId, perm);
  if (!(await deviceExists(q, deviceId))) throw new LabgateError("not_found", DEVICE_NOT_FOUND);
  return oneDevice(deviceId);
}

/**
 * The logs of the group's devices on which `identity` holds `perm` (the group itself must be
 * visible). A delete by a caller who may update none of them is refused, not answered as a delete
 * of nothing.
 */
export async function groupLogScope(q: Queries, identity: Identity, groupId: number, perm: Permission): Promise<DeviceScope> {
  await authorize(q, identity, "group", groupId, "read");
  if (!(await getGroup(q, groupId))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
  const filter = permissionFilter(identity, "device", "d", perm);
  const scope = bothScopes(memberFilter(groupId), filter);
  if (perm !== "read" && filter && !(await allowed(q, identity, "group", groupId, perm)) && (await countDevices(q, scope)) === 0) throw new LabgateError("forbidden", MSG_FORBIDDEN);
  return scope;
}

/** One entry `identity` may read (`read` on its device); a hidden one looks missing. */
export async function readableLog(q: Queries, identity: Identity, id: number): Promise<Log> {
  const log = await getLog(q, id);
  if (!log || !(await allowed(q, identity, "device", log.device_id, "read"))) throw new LabgateError("not_found", LOG_NOT_FOUND);
  return log;
}

/** Deletes one entry `identity` may update (`update` on its device). */
export async function removeLog(store: Store, identity: Identity, id: number, actor: Actor): Promise<void> {
  const log = await readableLog(store.query, identity, id);
  await authorize(store.query, identity, "device", log.device_id, "update");
  if (!(await deleteLog(store, log, actor))) throw new LabgateError("not_found", LOG_NOT_FOUND);
}

/** The entries (alias `l`) of the devices in scope that match `filter`. */
const matching = (devices: DeviceScope, filter: LogFilter): Expression<SqlBool> => {
  const parts = [sql<SqlBool>`l.device_id IN (SELECT d.id FROM devices d WHERE ${devices})`];
  if (filter.name !== undefined) parts.push(sql<SqlBool>`l.name = ${filter.name}`);
  if (filter.since) parts.push(sql<SqlBool>`l.device_timestamp >= ${isoTime(filter.since)}`);
  if (filter.to) parts.push(sql<SqlBool>`l.device_timestamp <= ${isoTime(filter.to)}`);
  return sql<SqlBool>`${sql.join(parts, sql` AND `)}`;
};

/** Entries per page of a streamed list (about 400 KiB of JSON at most). */
const STREAM_PAGE = 100;
/** A page without `limit`: every entry after the offset (both engines take a limit this large; neither a negative one). */
const ALL = Number.MAX_SAFE_INTEGER;

/**
 * The rows of a page: the database orders and cuts the matching ids only (its sort carries ids,
 * not 4 KiB entries), then reads that page's rows.
 */
const pageRows = (q: Queries, where: Expression<SqlBool>, limit: number, offset: number): Promise<LogRow[]> =>
  q
    .selectFrom("device_logs as l")
    .selectAll("l")
    .where("l.id", "in", (eb) => eb.selectFrom("device_logs as l").select("l.id").where(where).orderBy("l.device_timestamp", "desc").orderBy("l.id", "desc").limit(limit).offset(offset))
    .orderBy("l.device_timestamp", "desc")
    .orderBy("l.id", "desc")
    .execute();

/** How many entries of the devices in scope match `filter` (X-Total-Count). */
export async function countLogs(q: Queries, devices: DeviceScope, filter: LogFilter): Promise<number> {
  const row = await q
    .selectFrom("device_logs as l")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where(matching(devices, filter))
    .executeTakeFirstOrThrow();
  return row.n;
}

/** One page of the entries of the devices in scope matching `filter`, newest device timestamp first. */
export async function queryLogs(q: Queries, devices: DeviceScope, filter: LogFilter, page: LogPage): Promise<Log[]> {
  return (await pageRows(q, matching(devices, filter), page.limit ?? ALL, page.offset ?? 0)).map(toV1);
}

/**
 * Every matching entry, newest first, a page at a time: each page starts after the last one's
 * (device timestamp, id), so a page costs the same however deep into the list it is.
 */
export async function* logPages(q: Queries, devices: DeviceScope, filter: LogFilter): AsyncGenerator<Log[]> {
  const where = matching(devices, filter);
  let after: LogRow | undefined;
  for (;;) {
    const rows = await pageRows(q, after ? sql<SqlBool>`${where} AND (l.device_timestamp, l.id) < (${after.device_timestamp}, ${after.id})` : where, STREAM_PAGE, 0);
    if (rows.length > 0) yield rows.map(toV1);
    if (rows.length < STREAM_PAGE) return;
    after = rows[rows.length - 1];
  }
}

/** Deletes the entries of the devices in scope matching `filter`; `target` names the scope in the audit log (device:3, group:1). */
export function deleteLogs(store: Store, devices: DeviceScope, filter: LogFilter, actor: Actor, target: string): Promise<number> {
  const where = matching(devices, filter);
  return store.transact(async (tx) => {
    const { numDeletedRows } = await tx.deleteFrom("device_logs as l").where(where).executeTakeFirst();
    const removed = Number(numDeletedRows);
    await recordAudit(tx, actor, "log.delete", target, { ...filter, removed });
    return removed;
  });
}

async function getLog(q: Queries, id: number): Promise<Log | undefined> {
  const row = await q.selectFrom("device_logs").selectAll().where("id", "=", id).executeTakeFirst();
  return row && toV1(row);
}

function deleteLog(store: Store, log: { id: number; device_id: number }, actor: Actor): Promise<boolean> {
  return store.transact(async (tx) => {
    const { numDeletedRows } = await tx.deleteFrom("device_logs").where("id", "=", log.id).executeTakeFirst();
    if (numDeletedRows === 0n) return false;
    await recordAudit(tx, actor, "log.delete", `device:${log.device_id}`, { log: log.id, removed: 1 });
    return true;
  });
}
