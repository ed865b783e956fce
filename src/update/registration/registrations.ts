import type { Selectable } from "kysely";
import type { RegistrationsTable } from "../../db/schema.ts";
import type { Queries, Store, Tx } from "../../db/store.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { LabgateError } from "../../util/errors.ts";
import { isoTime, rfc822 } from "../../util/time.ts";
import { getDeviceByMac, insertDevice, rekeyDevice, tagsFromMetadata, type DeviceHooks } from "../devices/devices.ts";
import type { Metadata } from "../devices/metadata.ts";
import { parseDeviceKey } from "./keys.ts";
import type { PendingRegistration, ReferencePending } from "./schema.ts";
import { deviceName, metaKeys } from "../devices/metadata.ts";

type RegistrationRow = Pick<Selectable<RegistrationsTable>, "mac_address" | "key_fingerprint" | "public_key" | "metadata" | "last_appeared">;

const COLUMNS = ["mac_address", "key_fingerprint", "public_key", "metadata", "last_appeared"] as const;

/**
 * The pending registrations that have not expired (last appeared at or after `cutoff`, ISO), in
 * the order they first asked (asking again moves nothing, so a list being approved keeps still);
 * with `page`, that slice of them (GET /api/v1/auth/pending?limit=&offset=).
 */
export async function listPending(q: Queries, prefix: string, cutoff = "", page?: { limit?: number; offset?: number }): Promise<PendingRegistration[]> {
  const keys = metaKeys(prefix);
  let query = q
    .selectFrom("registrations as r")
    .leftJoin("devices as d", "d.mac_address", "r.mac_address")
    .select(COLUMNS.map((c) => `r.${c}` as const))
    .select(["d.id as device_id", "d.key_fingerprint as device_key_fingerprint"])
    .where("r.last_appeared", ">=", cutoff)
    .orderBy("r.seq")
    .orderBy("r.mac_address")
    .orderBy("r.key_fingerprint");
  if (page?.limit !== undefined) query = query.limit(page.limit);
  if (page?.offset) query = (page.limit === undefined ? query.limit(Number.MAX_SAFE_INTEGER) : query).offset(page.offset);
  const rows = await query.execute();
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
export async function countPending(q: Queries, cutoff = ""): Promise<number> {
  const row = await q
    .selectFrom("registrations")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("last_appeared", ">=", cutoff)
    .executeTakeFirst();
  return Number(row?.n ?? 0);
}

/** What a bulk removal of pending registrations selects; every given condition must hold. */
export interface PendingSelection {
  all?: boolean;
  /** Sent from this client address. */
  client_address?: string;
  /** Last appeared before this (ISO time). */
  before?: string;
}

/** Removes the pending registrations `selection` names (an admin cleaning up after a flood); how many went. */
export async function removePendingBulk(store: Store, selection: PendingSelection, actor: Actor): Promise<number> {
  const { client_address: address, before } = selection;
  if (address === undefined && before === undefined && !selection.all) throw new LabgateError("invalid", 'name what to remove: "all", "client_address" or "older_than"');
  return store.transact(async (tx) => {
    const result = await tx
      .deleteFrom("registrations")
      .$if(address !== undefined, (qb) => qb.where("client_address", "=", address!))
      .$if(before !== undefined, (qb) => qb.where("last_appeared", "<", before!))
      .executeTakeFirst();
    const removed = Number(result.numDeletedRows);
    await recordAudit(tx, actor, "registration.remove", "registrations", { ...selection, removed });
    return removed;
  });
}

/** The registration for exactly (MAC, key material); the key text may be encoded differently. */
async function findRegistration(q: Queries, mac: string, publicKey: string): Promise<RegistrationRow | undefined> {
  // Any key a protocol's authorization stored: approval only names it.
  const key = parseDeviceKey(publicKey, { ecdsa: true });
  if (typeof key === "string") throw new LabgateError("invalid", key);
  return registrationOf(q, mac, key.fingerprint);
}

function registrationOf(q: Queries, mac: string, fingerprint: string): Promise<RegistrationRow | undefined> {
  return q.selectFrom("registrations").select(COLUMNS).where("mac_address", "=", mac).where("key_fingerprint", "=", fingerprint).executeTakeFirst();
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
  store: Store,
  hooks: DeviceHooks,
  prefix: string,
  mac: string,
  publicKey: string,
  confirmKeyChange: boolean,
  now: Date,
  actor: Actor,
): Promise<RegisterResult> {
  const found = await findRegistration(store.query, mac, publicKey);
  if (!found) throw new LabgateError("not_found", "specified registration does not exist");
  const existing = await getDeviceByMac(store.query, mac);
  if (existing && existing.key_fingerprint !== found.key_fingerprint && !confirmKeyChange) {
    throw new LabgateError(
      "conflict",
      `this registration replaces the key of existing device ${existing.id} (${mac}); approve it with "confirm_key_change": true if the device really changed its key`,
    );
  }
  const result = await store.transact(async (tx) => {
    // Re-read inside the transaction: another request may have approved or deleted meanwhile.
    const reg = await registrationOf(tx, mac, found.key_fingerprint);
    if (!reg) throw new LabgateError("not_found", "specified registration does not exist");
    const metadata = JSON.parse(reg.metadata) as Metadata;
    const name = deviceName(metadata, mac, prefix);
    const device = await getDeviceByMac(tx, mac);
    await deleteRegistration(tx, mac, reg.key_fingerprint);
    if (device) {
      if (device.key_fingerprint !== reg.key_fingerprint && !confirmKeyChange) throw new LabgateError("conflict", "the device changed meanwhile; repeat the approval");
      await rekeyDevice(tx, device.id, { publicKey: reg.public_key, fingerprint: reg.key_fingerprint, metadataText: reg.metadata, name, at: reg.last_appeared });
      await recordAudit(tx, actor, "device.key_change", `device:${device.id}`, { mac, from: device.key_fingerprint, to: reg.key_fingerprint });
      return { device_id: device.id, outcome: "rekeyed" as const };
    }
    const id = await insertDevice(tx, mac, {
      created: isoTime(now),
      name,
      publicKey: reg.public_key,
      fingerprint: reg.key_fingerprint,
      metadataText: reg.metadata,
      at: reg.last_appeared,
      tags: tagsFromMetadata(metadata[metaKeys(prefix).tags]),
    });
    await recordAudit(tx, actor, "device.approve", `device:${id}`, { mac, key: reg.key_fingerprint });
    return { device_id: id, outcome: "created" as const };
  }, { serialOn: ["registrations"] });
  // The earlier key's tokens and socket end now: the gate forgets the old key.
  if (result.outcome === "rekeyed") hooks.keyChanged({ id: result.device_id, mac_address: mac });
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
  store: Store,
  hooks: DeviceHooks,
  prefix: string,
  items: ReadonlyArray<{ mac: string; publicKey: string; confirmKeyChange: boolean }>,
  now: Date,
  actor: Actor,
): Promise<BulkApproval[]> {
  const results: BulkApproval[] = [];
  for (const item of items) {
    try {
      const { device_id } = await approveRegistration(store, hooks, prefix, item.mac, item.publicKey, item.confirmKeyChange, now, actor);
      results.push({ mac_address: item.mac, device_id, error: null });
    } catch (error) {
      if (!(error instanceof LabgateError)) throw error;
      results.push({ mac_address: item.mac, device_id: null, error: error.message });
    }
  }
  return results;
}

/** A deleted device's pending registrations go with it (a DeviceHooks deletion hook). */
export async function deleteRegistrationsOf(tx: Tx, mac: string): Promise<void> {
  await tx.deleteFrom("registrations").where("mac_address", "=", mac).execute();
}

async function deleteRegistration(tx: Tx, mac: string, fingerprint: string): Promise<number> {
  const result = await tx.deleteFrom("registrations").where("mac_address", "=", mac).where("key_fingerprint", "=", fingerprint).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/** Removes a pending registration; 404 when there is none for that (MAC, key). */
export async function removePending(store: Store, mac: string, publicKey: string, actor: Actor): Promise<void> {
  const found = await findRegistration(store.query, mac, publicKey);
  if (!found) throw new LabgateError("not_found", "registration does not exist");
  await store.transact(async (tx) => {
    await deleteRegistration(tx, mac, found.key_fingerprint);
    await recordAudit(tx, actor, "registration.remove", `mac:${mac}`, { key: found.key_fingerprint });
  });
}
