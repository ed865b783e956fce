import type { Database, Tx } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { LabgateError } from "../../util/errors.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { getDeviceByMac, insertDevice, rekeyDevice, tagsFromMetadata, type DeviceHooks } from "../devices/devices.ts";
import type { Metadata } from "../devices/metadata.ts";
import { parseDeviceKey } from "./keys.ts";
import type { PendingRegistration, ReferencePending } from "./schema.ts";
import { deviceName, metaKeys } from "../devices/metadata.ts";

interface RegistrationRow {
  mac_address: string;
  key_fingerprint: string;
  public_key: string;
  metadata: string;
  last_appeared: string;
}

/**
 * The pending registrations that have not expired (last appeared at or after `cutoff`, ISO), in
 * the order they first asked (asking again moves nothing, so a list being approved keeps still);
 * with `page`, that slice of them (GET /api/v1/auth/pending?limit=&offset=).
 */
export function listPending(db: Database, prefix: string, cutoff = "", page?: { limit?: number; offset?: number }): PendingRegistration[] {
  const keys = metaKeys(prefix);
  const slice = page ? " LIMIT ? OFFSET ?" : "";
  const params: Array<string | number> = page ? [cutoff, page.limit ?? -1, page.offset ?? 0] : [cutoff];
  const rows = db.all<RegistrationRow & { device_id: number | null; device_key_fingerprint: string | null }>(
    `SELECT r.mac_address, r.key_fingerprint, r.public_key, r.metadata, r.last_appeared, d.id AS device_id, d.key_fingerprint AS device_key_fingerprint
     FROM registrations r LEFT JOIN devices d ON d.mac_address = r.mac_address
     WHERE r.last_appeared >= ?
     ORDER BY r.rowid${slice}`,
    params,
  );
  return rows.map((r) => {
    const metadata = JSON.parse(r.metadata) as Metadata;
    const protocol = protocolOf(metadata, prefix);
    return {
      mac_address: r.mac_address,
      public_key: r.public_key,
      key_fingerprint: r.key_fingerprint,
      last_appeared: rfc822(new Date(r.last_appeared)),
      metadata,
      key_change: r.device_id !== null,
      device_id: r.device_id,
      device_key_fingerprint: r.device_id === null ? null : r.device_key_fingerprint,
      protocol,
      identity: protocol === "labgate" ? null : identityOf(metadata[keys.identity]),
    };
  });
}

/** The device protocol a registration or device asked with (the server set the key; labgate's when absent). */
export const protocolOf = (metadata: Metadata, prefix: string): "labgate" | "mender" => (metadata[metaKeys(prefix).protocol] === "mender" ? "mender" : "labgate");

function identityOf(value: unknown): Record<string, unknown> | null {
  if (typeof value !== "string") return null;
  try {
    const parsed = JSON.parse(value);
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : null;
  } catch {
    return null;
  }
}

/** A pending registration with exactly the reference's fields (its clients load the list with a strict schema). */
export const referencePending = (p: PendingRegistration): ReferencePending => ({
  mac_address: p.mac_address,
  public_key: p.public_key,
  last_appeared: p.last_appeared,
  metadata: p.metadata,
});

/** How many pending registrations have not expired (X-Total-Count of a paged list). */
export const countPending = (db: Database, cutoff = ""): number =>
  db.get<{ n: number }>("SELECT COUNT(*) AS n FROM registrations WHERE last_appeared >= ?", [cutoff])?.n ?? 0;

/** What a bulk removal of pending registrations selects; every given condition must hold. */
export interface PendingSelection {
  all?: boolean;
  /** Sent from this client address. */
  client_address?: string;
  /** Last appeared before this (ISO time). */
  before?: string;
}

/** Removes the pending registrations `selection` names (an admin cleaning up after a flood); how many went. */
export async function removePendingBulk(db: Database, selection: PendingSelection, actor: Actor): Promise<number> {
  const where: string[] = [];
  const params: string[] = [];
  if (selection.client_address !== undefined) {
    where.push("client_address = ?");
    params.push(selection.client_address);
  }
  if (selection.before !== undefined) {
    where.push("last_appeared < ?");
    params.push(selection.before);
  }
  if (where.length === 0 && !selection.all) throw new LabgateError("invalid", 'name what to remove: "all", "client_address" or "older_than"');
  return db.write((tx) => {
    const removed = tx.run(`DELETE FROM registrations${where.length ? ` WHERE ${where.join(" AND ")}` : ""}`, params).changes;
    recordAudit(tx, actor, "registration.remove", "registrations", { ...selection, removed });
    return removed;
  });
}

/** The registration for exactly (MAC, key material); the key text may be encoded differently. */
function findRegistration(db: Database, mac: string, publicKey: string): RegistrationRow | undefined {
  // Any key a protocol's authorization stored: approval only names it.
  const key = parseDeviceKey(publicKey, { ecdsa: true });
  if (typeof key === "string") throw new LabgateError("invalid", key);
  return db.get<RegistrationRow>(
    "SELECT mac_address, key_fingerprint, public_key, metadata, last_appeared FROM registrations WHERE mac_address = ? AND key_fingerprint = ?",
    [mac, key.fingerprint],
  );
}

export interface RegisterResult {
  device_id: number;
  /** "created": a new device; "rekeyed": an existing device got the new key. */
  outcome: "created" | "rekeyed";
}

/**
 * Approves a pending registration. A new MAC becomes a device (named as metadata.ts says, tags from the
 * registration metadata); an existing device gets the new key only with `confirmKeyChange`
 * (409 otherwise) and keeps its id, name rule, groups, tags, capabilities and permissions; the
 * tokens of its earlier key stop working at once and its socket is closed (DeviceHooks.keyChanged).
 * The registration is removed; other registrations of the MAC stay.
 */
export async function approveRegistration(
  db: Database,
  hooks: DeviceHooks,
  prefix: string,
  mac: string,
  publicKey: string,
  confirmKeyChange: boolean,
  now: Date,
  actor: Actor,
): Promise<RegisterResult> {
  const found = findRegistration(db, mac, publicKey);
  if (!found) throw new LabgateError("not_found", "specified registration does not exist");
  const existing = getDeviceByMac(db, mac);
  if (existing && existing.key_fingerprint !== found.key_fingerprint && !confirmKeyChange) {
    throw new LabgateError(
      "conflict",
      `this registration replaces the key of existing device ${existing.id} (${mac}); approve it with "confirm_key_change": true if the device really changed its key`,
    );
  }
  const result = await db.write((tx) => {
    // Re-read inside the transaction: another request may have approved or deleted meanwhile.
    const reg = tx.get<RegistrationRow>("SELECT * FROM registrations WHERE mac_address = ? AND key_fingerprint = ?", [mac, found.key_fingerprint]);
    if (!reg) throw new LabgateError("not_found", "specified registration does not exist");
    const metadata = JSON.parse(reg.metadata) as Metadata;
    const name = deviceName(metadata, mac, prefix);
    const device = getDeviceByMac(tx, mac);
    tx.run("DELETE FROM registrations WHERE mac_address = ? AND key_fingerprint = ?", [mac, reg.key_fingerprint]);
    if (device) {
      if (device.key_fingerprint !== reg.key_fingerprint && !confirmKeyChange) throw new LabgateError("conflict", "the device changed meanwhile; repeat the approval");
      rekeyDevice(tx, device.id, { publicKey: reg.public_key, fingerprint: reg.key_fingerprint, metadataText: reg.metadata, name, at: reg.last_appeared });
      recordAudit(tx, actor, "device.key_change", `device:${device.id}`, { mac, from: device.key_fingerprint, to: reg.key_fingerprint });
      return { device_id: device.id, outcome: "rekeyed" as const };
    }
    const id = insertDevice(tx, mac, {
      created: isoTime(now),
      name,
      publicKey: reg.public_key,
      fingerprint: reg.key_fingerprint,
      metadataText: reg.metadata,
      at: reg.last_appeared,
      tags: tagsFromMetadata(metadata[metaKeys(prefix).tags]),
    });
    recordAudit(tx, actor, "device.approve", `device:${id}`, { mac, key: reg.key_fingerprint });
    return { device_id: id, outcome: "created" as const };
  });
  // The earlier key's tokens and socket end now: the gate forgets the old key.
  const device = result.outcome === "rekeyed" ? getDeviceByMac(db, mac) : undefined;
  if (device) hooks.keyChanged(device);
  return result;
}

/** What one approval of a bulk approval did: the device, or why not. */
export interface BulkApproval {
  mac_address: string;
  device_id: number | null;
  error: string | null;
}

/**
 * Approves each registration of `items` as approveRegistration does, one after the other with
 * the same checks; one refused (gone, a key change not confirmed) does not stop the others.
 */
export async function approveRegistrations(
  db: Database,
  hooks: DeviceHooks,
  prefix: string,
  items: ReadonlyArray<{ mac: string; publicKey: string; confirmKeyChange: boolean }>,
  now: Date,
  actor: Actor,
): Promise<BulkApproval[]> {
  const results: BulkApproval[] = [];
  for (const item of items) {
    try {
      const { device_id } = await approveRegistration(db, hooks, prefix, item.mac, item.publicKey, item.confirmKeyChange, now, actor);
      results.push({ mac_address: item.mac, device_id, error: null });
    } catch (error) {
      if (!(error instanceof LabgateError)) throw error;
      results.push({ mac_address: item.mac, device_id: null, error: error.message });
    }
  }
  return results;
}

/** A deleted device's pending registrations go with it (a DeviceHooks deletion hook). */
export function deleteRegistrationsOf(tx: Tx, mac: string): void {
  tx.run("DELETE FROM registrations WHERE mac_address = ?", [mac]);
}

/** Removes a pending registration; 404 when there is none for that (MAC, key). */
export async function removePending(db: Database, mac: string, publicKey: string, actor: Actor): Promise<void> {
  const found = findRegistration(db, mac, publicKey);
  if (!found) throw new LabgateError("not_found", "registration does not exist");
  await db.write((tx) => {
    tx.run("DELETE FROM registrations WHERE mac_address = ? AND key_fingerprint = ?", [mac, found.key_fingerprint]);
    recordAudit(tx, actor, "registration.remove", `mac:${mac}`, { key: found.key_fingerprint });
  });
}
