import { httpError } from "../../http/errors.ts";
import type { Metadata } from "../devices/devices.ts";

/** Metadata keys of the device protocol, under the configured product prefix. */
export const metaKeys = (prefix: string) => ({
  version: `${prefix}.software.version`,
  devtype: `${prefix}.hardware.devtype`,
  mac: `${prefix}.hardware.macaddr`,
  tags: `${prefix}.software.tags`,
  name: `${prefix}.device.name`,
});

const MAC = /^[0-9A-Za-z][0-9A-Za-z:._-]{0,63}$/;
const MAX_KEYS = 256;
const MAX_VALUE = 4096;

/**
 * Checks device metadata (9.1): an object of string or string-list values that holds the
 * version, device type and MAC keys. Returns it typed; 400 with the reason otherwise.
 */
export function validateDeviceMetadata(value: unknown, prefix: string): Metadata {
  const fail = (why: string) => httpError(400, `schema validation failed: metadata ${why}`);
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw fail("must be an object");
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > MAX_KEYS) throw fail(`has more than ${MAX_KEYS} keys`);
  for (const [key, v] of entries) {
    const ok =
      (typeof v === "string" && v.length <= MAX_VALUE) ||
      (Array.isArray(v) && v.length <= MAX_KEYS && v.every((x) => typeof x === "string" && x.length <= MAX_VALUE));
    if (!ok) throw fail(`value of "${key}" must be a string or a list of strings`);
  }
  const keys = metaKeys(prefix);
  const metadata = value as Metadata;
  for (const key of [keys.version, keys.devtype, keys.mac]) {
    if (typeof metadata[key] !== "string" || metadata[key] === "") throw fail(`must contain "${key}" (a non-empty string)`);
  }
  if (!MAC.test(metadata[keys.mac] as string)) throw fail(`"${keys.mac}" is not a valid MAC address`);
  return metadata;
}

/** D10: the name the device reports (`svc.device.name`) when it sends one, else its MAC. */
export function deviceName(metadata: Metadata, mac: string, prefix: string): string {
  const reported = metadata[metaKeys(prefix).name];
  return typeof reported === "string" && reported.trim() !== "" ? reported.trim().slice(0, 128) : mac;
}
