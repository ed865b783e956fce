import { createHash } from "node:crypto";
import { sql } from "kysely";
import type { AppContext } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { dateOf, epochSeconds, isoTime } from "../../util/time.ts";
import { getDeviceByMac, setDeviceMetadata } from "../devices/devices.ts";
import { decodeSignature, parseDeviceKey, verifyDeviceSignature, type DeviceKey } from "./keys.ts";
import { metaKeys, type Metadata } from "../devices/metadata.ts";
import type { DeviceAuthFields } from "./schema.ts";
import { ReplayGuard } from "./replay.ts";

export type DeviceAuthResult = { status: "accepted"; token: string; expires: number; deviceId: number } | { status: "pending" };

/** Header carrying the device's signature, e.g. `X-SVC-Device-Signature`. */
export const signatureHeader = (prefix: string): string => `X-${prefix.toUpperCase()}-Device-Signature`;

const MAX_PENDING_PER_MAC = 8;
/** MACs one key may wait with (a device has one MAC; a flood script reuses its key). */
export const MAX_PENDING_PER_KEY = 4;
/** Pending registrations from one client address (a lab has few devices behind one address). */
export const MAX_PENDING_PER_ADDRESS = 100;

/** Pending registrations that last appeared before this (ISO time) have expired. */
export const pendingCutoff = (ctx: Pick<AppContext, "clock" | "config">, now = dateOf(ctx.clock)): string =>
  isoTime(now.getTime() - ctx.config.update_server.pending_registration_ttl * 1000);

/**
 * Device authorization (docs/device-protocol.md), given the raw body bytes exactly as received and
 * the signature header:
 *   schema -> signature header -> key -> signature over the raw bytes -> timestamp window ->
 *   replay -> accepted device: token; anything else: pending registration (MAC, key) upserted.
 * Failures before the registration step are 400 with the reason.
 */
export async function authorizeDevice(
  ctx: Pick<AppContext, "clock" | "config" | "store" | "tokens">,
  replay: ReplayGuard,
  raw: Buffer,
  fields: DeviceAuthFields,
  signature: string | undefined,
  now: Date = dateOf(ctx.clock),
  client = "",
): Promise<DeviceAuthResult> {
  const { prefix } = ctx.config;
  const { metadata, timestamp } = fields;

  const header = signatureHeader(prefix);
  if (signature === undefined || signature.trim() === "") throw new LabgateError("invalid", `request is missing device signature header (${header})`);
  const key = parseDeviceKey(fields.public_key);
  if (typeof key === "string") throw new LabgateError("invalid", key);
  const signatureBytes = decodeSignature(signature);
  if (!signatureBytes) throw new LabgateError("invalid", `signature verification failed: ${header} is not base64`);
  if (!verifyDeviceSignature(key, raw, signatureBytes)) throw new LabgateError("invalid", "signature verification failed");

  const window = ctx.config.compat.auth_timestamp_window;
  const nowSec = epochSeconds(now);
  if (window > 0) {
    if (Math.abs(timestamp - nowSec) > window) {
      throw new LabgateError("invalid", `timestamp ${timestamp} is more than ${window} s away from the server time ${nowSec}`);
    }
    const digest = createHash("sha256").update(raw).digest("base64");
    if (!replay.accept(digest, timestamp + window, nowSec)) throw new LabgateError("invalid", "replayed request: this signed request was already used");
  }

  // The protocol key is the server's to set: a labgate agent cannot claim another protocol.
  const { [metaKeys(prefix).protocol]: _protocol, [metaKeys(prefix).identity]: _identity, ...reported } = metadata;
  return admitDevice(ctx, { mac: metadata[metaKeys(prefix).mac] as string, key, publicKey: fields.public_key as string, metadata: reported }, now, client);
}

/** A device that proved it holds `key`, as its protocol's authorization parsed it. */
export interface Applicant {
  mac: string;
  key: DeviceKey;
  /** The key's text as the device sent it (shown in the pending list, given back to approve it). */
  publicKey: string;
  metadata: Metadata;
}

/**
 * The one step every device protocol's authorization ends with, once the request is verified: a
 * device with this MAC and key gets a token (its reported metadata replacing the stored one);
 * anything else becomes (or refreshes) a pending registration, within the bounds of a public route.
 */
export async function admitDevice(
  ctx: Pick<AppContext, "clock" | "config" | "store" | "tokens">,
  applicant: Applicant,
  now: Date = dateOf(ctx.clock),
  client = "",
): Promise<DeviceAuthResult> {
  const { mac, key, metadata } = applicant;
  const accepted = async (device: { id: number; metadata: string }): Promise<DeviceAuthResult> => {
    // The reported metadata is kept; the name is not: it was taken at approval and only a
    // management request changes it (a name can match device_by_tag permissions).
    const metadataText = JSON.stringify(metadata);
    if (device.metadata !== metadataText) {
      await setDeviceMetadata(ctx.store.query, device.id, metadataText);
    }
    const ttl = ctx.config.update_server.device_token_ttl;
    return { status: "accepted", token: ctx.tokens.issueDevice(mac, device.id, ttl, key.fingerprint), expires: ttl, deviceId: device.id };
  };
  const device = await getDeviceByMac(ctx.store.query, mac);
  if (device && device.key_fingerprint === key.fingerprint) return accepted(device);

  // Waiting devices ask again and again, and each request counts the whole table: one at a time.
  const approved = await ctx.store.transact(async (tx) => {
    // Read again with the registration's write: an approval that committed since must not leave a pending row behind.
    const meanwhile = await getDeviceByMac(tx, mac);
    if (meanwhile && meanwhile.key_fingerprint === key.fingerprint) return meanwhile;
    // Pending rows expire: a waiting device repeats its request every few seconds.
    await tx.deleteFrom("registrations").where("last_appeared", "<", pendingCutoff(ctx, now)).execute();
    const known = await tx.selectFrom("registrations").select("seq").where("mac_address", "=", mac).where("key_fingerprint", "=", key.fingerprint).executeTakeFirst();
    // The route is public: bound what unapproved requests can store, in total, per key and per address.
    if (!known) {
      const count = async (column?: "key_fingerprint" | "client_address", value?: string) => {
        const row = await tx
          .selectFrom("registrations")
          .select((eb) => eb.fn.countAll<number>().as("n"))
          .$if(column !== undefined, (qb) => qb.where(column!, "=", value!))
          .executeTakeFirst();
        return Number(row?.n ?? 0);
      };
      const total = ctx.config.update_server.max_pending_registrations;
      if ((await count()) >= total) throw new LabgateError("too_many", `too many pending registrations (${total}, update_server.max_pending_registrations); approve or remove some`);
      if ((await count("key_fingerprint", key.fingerprint)) >= MAX_PENDING_PER_KEY) {
        throw new LabgateError("too_many", `this key has ${MAX_PENDING_PER_KEY} pending registrations (other MAC addresses) already`);
      }
      if (client && (await count("client_address", client)) >= MAX_PENDING_PER_ADDRESS) {
        throw new LabgateError("too_many", `too many pending registrations from ${client} (${MAX_PENDING_PER_ADDRESS}); approve or remove some`);
      }
    }
    // A new registration is the last in the pending list's order; asking again keeps its place.
    await tx
      .insertInto("registrations")
      .values({
        mac_address: mac,
        key_fingerprint: key.fingerprint,
        public_key: applicant.publicKey,
        metadata: JSON.stringify(metadata),
        last_appeared: isoTime(now),
        client_address: client,
        seq: sql<number>`(SELECT coalesce(max(seq), 0) + 1 FROM registrations)`,
      })
      .onConflict((oc) =>
        oc.columns(["mac_address", "key_fingerprint"]).doUpdateSet((eb) => ({
          public_key: eb.ref("excluded.public_key"),
          metadata: eb.ref("excluded.metadata"),
          last_appeared: eb.ref("excluded.last_appeared"),
          client_address: eb.ref("excluded.client_address"),
        })),
      )
      .execute();
    // One MAC keeps its newest few keys only.
    await tx
      .deleteFrom("registrations")
      .where("mac_address", "=", mac)
      .where("key_fingerprint", "not in", (eb) =>
        eb.selectFrom("registrations").select("key_fingerprint").where("mac_address", "=", mac).orderBy("last_appeared", "desc").orderBy("key_fingerprint").limit(MAX_PENDING_PER_MAC),
      )
      .execute();
    return undefined;
  }, { serialOn: ["registrations"] });
  return approved ? accepted(approved) : { status: "pending" };
}
