import * as z from "zod";
import type { DeviceMetadata } from "./schema.ts";

/** A device's reported metadata: key to value, or to a list for repeated keys. */
export type Metadata = z.infer<typeof DeviceMetadata>;

/** Metadata keys of the device protocol, under the configured product prefix. */
export const metaKeys = (prefix: string) => ({
  version: `${prefix}.software.version`,
  devtype: `${prefix}.hardware.devtype`,
  mac: `${prefix}.hardware.macaddr`,
  tags: `${prefix}.software.tags`,
  name: `${prefix}.device.name`,
  /** The device protocol it speaks when not labgate's (`mender`); set by the server, never reported. */
  protocol: `${prefix}.device.protocol`,
  /** Another protocol's identity of the device (Mender's id_data), as JSON text. */
  identity: `${prefix}.device.identity`,
});

const MAC = /^[0-9A-Za-z][0-9A-Za-z:._-]{0,63}$/;
const MAX_KEYS = 256;
const MAX_VALUE = 4096;

const metadataError = (why: string) => `schema validation failed: metadata ${why}`;
/** The key is the last string in the issue's path (`["metadata", "x", 1]` for a list item). */
const valueError = (iss: { path?: PropertyKey[] }) =>
  metadataError(`value of ${JSON.stringify(String((iss.path ?? []).filter((p) => typeof p === "string").at(-1) ?? ""))} must be a string or a list of strings`);

/**
 * Device metadata: an object of string or string-list values that holds the version,
 * device type and MAC keys.
 */
export const deviceMetadata = (prefix: string) => {
  const keys = metaKeys(prefix);
  return z
    .record(
      z.string(),
      z.union([z.string({ error: valueError }).max(MAX_VALUE, { error: valueError }), z.array(z.string({ error: valueError }).max(MAX_VALUE, { error: valueError }), { error: valueError }).max(MAX_KEYS, { error: valueError })], {
        error: valueError,
      }),
      { error: metadataError("must be an object") },
    )
    .superRefine((metadata, ctx) => {
      const fail = (why: string) => ctx.addIssue({ code: "custom", message: metadataError(why) });
      if (Object.keys(metadata).length > MAX_KEYS) return fail(`has more than ${MAX_KEYS} keys`);
      for (const key of [keys.version, keys.devtype, keys.mac]) {
        if (typeof metadata[key] !== "string" || metadata[key] === "") return fail(`must contain "${key}" (a non-empty string)`);
      }
      if (!MAC.test(metadata[keys.mac] as string)) return fail(`"${keys.mac}" is not a valid MAC address`);
    })
    .meta({ required: [keys.version, keys.devtype, keys.mac], maxProperties: MAX_KEYS }) as z.ZodType<Metadata>;
};

/** The name the device reports (`svc.device.name`) when it sends one, else its MAC. */
export function deviceName(metadata: Metadata, mac: string, prefix: string): string {
  const reported = metadata[metaKeys(prefix).name];
  return typeof reported === "string" && reported.trim() !== "" ? reported.trim().slice(0, 128) : mac;
}
