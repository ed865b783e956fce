/*
 * Device logs (update-server.md 15.2): telemetry entries a device sends in batches, read and
 * deleted by managers per device, per group or one by one. Unlike the reference, storage is
 * bounded: at most `device_logs_per_device` entries per device (a batch that goes over drops the
 * device's oldest entries in the same commit) and at most `device_logs_max_batch` per batch.
 */
import type { Database, Tx } from "../../db/index.ts";
import { parseRfc822, rfc822 } from "../../util/time.ts";
import type { SqlFilter } from "../permissions/permissions.ts";
import { z } from "zod";
import { strictBody, zRequiredString } from "../validation.ts";

/** Longest `name` and `entry` accepted: entries live in the (in-memory) database. */
export const MAX_NAME = 256;
export const MAX_ENTRY = 4096;

export interface LogInput {
  device_timestamp: Date;
  name: string;
  entry: string;
}

/** The log object of 15.2; dates in the update server's RFC 822 form. */
export interface LogV1 {
  id: number;
  created: string;
  device_id: number;
  device_timestamp: string;
  name: string;
  entry: string;
}

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

const RFC822_HINT = 'an RFC 822 date such as "Wed, 02 Oct 2002 15:00:00 -0000"';

/** An RFC 822 date given as text, as a Date. */
const rfc822Field = (key: string) =>
  zRequiredString(key, 64).transform((text, ctx) => {
    const date = parseRfc822(text);
    if (!date) ctx.addIssue({ code: "custom", message: `schema validation failed: field "${key}" must be ${RFC822_HINT}` });
    return date ?? z.NEVER;
  });

const LogEntry = z.strictObject(
  {
    device_timestamp: rfc822Field("device_timestamp"),
    name: zRequiredString("name", MAX_NAME),
    // An entry may be empty (a metric with no value); it must still be a string.
    entry: z
      .string({ error: 'schema validation failed: field "entry" must be a string' })
      .max(MAX_ENTRY, { error: `schema validation failed: field "entry" is longer than ${MAX_ENTRY} characters` }),
  },
  { error: (iss) => (iss.code === "invalid_type" ? "schema validation failed: a batch entry must be an object" : undefined) },
);

/** `{"batch": [{device_timestamp, name, entry}, ...]}` with at most `maxBatch` entries. */
export const logBatchBody = (maxBatch: number) =>
  strictBody({
    batch: z
      .array(LogEntry, { error: 'schema validation failed: field "batch" must be a list of log entries' })
      .max(maxBatch, { error: (iss) => `schema validation failed: field "batch" has ${(iss.input as unknown[]).length} entries; at most ${maxBatch} are accepted at once` }),
  });

/** The `since`, `to` (RFC 822) and `name` query parameters; a malformed date is a 400. */
const queryDate = (key: string, what: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const date = parseRfc822(text);
      if (!date) ctx.addIssue({ code: "custom", message: `schema validation failed: query parameter "${key}" must be ${RFC822_HINT}` });
      return date;
    })
    .describe(`RFC 822; entries with device_timestamp ${what}`);

export const logFilterQuery = z.object({
  since: queryDate("since", "at or after"),
  to: queryDate("to", "at or before"),
  name: z
    .string()
    .optional()
    .transform((name) => name || undefined)
    .describe("only entries with this name"),
});


const toV1 = (row: LogRow): LogV1 => ({
  id: row.id,
  created: rfc822(new Date(row.created)),
  device_id: row.device_id,
  device_timestamp: rfc822(new Date(row.device_timestamp)),
  name: row.name,
  entry: row.entry,
});

/**
 * Stores a batch for device `deviceId` in one durable commit and drops that device's oldest
 * entries beyond `perDevice`. False when the device no longer exists.
 */
export function appendLogs(db: Database, deviceId: number, entries: LogInput[], perDevice: number, now = new Date()): Promise<boolean> {
  return db.write((tx) => {
    if (!tx.get("SELECT 1 AS ok FROM devices WHERE id = ?", [deviceId])) return false;
    for (const e of entries) {
      tx.run("INSERT INTO device_logs (device_id, created, device_timestamp, name, entry) VALUES (?, ?, ?, ?, ?)", [
        deviceId,
        now.toISOString(),
        e.device_timestamp.toISOString(),
        e.name,
        e.entry,
      ]);
    }
    tx.run("DELETE FROM device_logs WHERE device_id = ? AND id <= (SELECT id FROM device_logs WHERE device_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)", [
      deviceId,
      deviceId,
      perDevice,
    ]);
    return true;
  });
}

/** `devices d` rows whose logs a query covers, as an SQL condition on `d`. */
export type DeviceScope = SqlFilter;

const where = (devices: DeviceScope, filter: LogFilter): SqlFilter => {
  const parts = [`l.device_id IN (SELECT d.id FROM devices d WHERE ${devices.sql})`];
  const params = [...devices.params];
  if (filter.name !== undefined) parts.push("l.name = ?"), params.push(filter.name);
  if (filter.since) parts.push("l.device_timestamp >= ?"), params.push(filter.since.toISOString());
  if (filter.to) parts.push("l.device_timestamp <= ?"), params.push(filter.to.toISOString());
  return { sql: parts.join(" AND "), params };
};

/** The entries of the devices in scope matching `filter`, newest device timestamp first. */
export function queryLogs(db: Database, devices: DeviceScope, filter: LogFilter): LogV1[] {
  const w = where(devices, filter);
  return db.all<LogRow>(`SELECT l.* FROM device_logs l WHERE ${w.sql} ORDER BY l.device_timestamp DESC, l.id DESC`, w.params).map(toV1);
}

/** Deletes the entries of the devices in scope matching `filter`; returns how many went. */
export function deleteLogs(db: Database, devices: DeviceScope, filter: LogFilter): Promise<number> {
  const w = where(devices, filter);
  return db.write((tx) => tx.run(`DELETE FROM device_logs AS l WHERE ${w.sql}`, w.params).changes);
}

export function getLog(db: Database | Tx, id: number): LogV1 | undefined {
  const row = db.get<LogRow>("SELECT * FROM device_logs WHERE id = ?", [id]);
  return row && toV1(row);
}

export function deleteLog(db: Database, id: number): Promise<boolean> {
  return db.write((tx) => tx.run("DELETE FROM device_logs WHERE id = ?", [id]).changes > 0);
}
