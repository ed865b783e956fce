/**
 * The devices API's shapes, each once: devices/routes.ts registers them with the routes (the
 * OpenAPI document shows them), the handlers answer with these types, the console imports them.
 */
import * as z from "zod";
import { AnyObject, integerParam, Rfc822, strictBody } from "../../util/shapes.ts";

/** What a device reports about itself: key to value, or to a list for repeated keys (docs/update-server.md, "Device metadata"). */
export const DeviceMetadata = z.record(z.string(), z.union([z.string(), z.array(z.string())]));

const deviceFields = {
  id: z.int(),
  name: z.string().describe("its reported name, else its MAC address, until a manager renames it"),
  mac_address: z.string(),
  capabilities: AnyObject.describe("what the device's agent can do (shell, file transfer, actions)"),
  metadata: DeviceMetadata,
  last_access: Rfc822.nullable().describe("its last authorization or update check"),
  public_key: z.string().nullable().describe("PEM"),
};

/** A device (v2): its groups and whether it holds the management socket now. */
export const Device = z.object({ ...deviceFields, groups: z.array(z.int()), connected: z.boolean() }).meta({ id: "DeviceV2" });
export type Device = z.infer<typeof Device>;

/** A device as the v1 routes show it: its one group (the one whose update policy applies), else null. */
export const DeviceV1 = z.object({ ...deviceFields, group: z.int().nullable() }).meta({ id: "DeviceV1" });
export type DeviceV1 = z.infer<typeof DeviceV1>;

/** What a device list can be ordered by (`sort`). */
export const DEVICE_SORTS = ["id", "name", "mac_address", "version", "type", "last_access"] as const;
export type DeviceSort = (typeof DEVICE_SORTS)[number];

/** Paging and order of the device lists; without limit, offset or q the lists answer every device. */
export const DeviceListQuery = z.object({
  limit: integerParam("limit", 1, 1000).describe("at most this many devices (with X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many of the matches (in the order of `sort`)"),
  q: z
    .string()
    .max(256, { error: 'query parameter "q" must be at most 256 characters' })
    .optional()
    .describe("only devices with this text in their name, MAC address, id, version or device type (ignoring case)"),
  sort: z.enum(DEVICE_SORTS, { error: `query parameter "sort" must be one of ${DEVICE_SORTS.join(", ")}` }).optional().describe("the order of the list (default id); ties by id"),
  order: z.enum(["asc", "desc"], { error: 'query parameter "order" must be asc or desc' }).optional().describe("with sort: ascending (default) or descending"),
});

/** A device name: 1 to 128 characters, no control characters, no surrounding blanks. */
export const validDeviceName = (name: string): boolean => name.length > 0 && name.length <= 128 && name.trim() === name && !/[\u0000-\u001f\u007f]/.test(name);

const NAME_ERROR = 'schema validation failed: field "name" must be 1 to 128 characters without control characters or surrounding blanks';
/** The body of PATCH /api/v2/devices/{id}: the device's new name (what device_by_tag permissions match). */
export const DeviceRename = strictBody({
  name: z.string({ error: NAME_ERROR }).refine(validDeviceName, { error: NAME_ERROR }).meta({ minLength: 1, maxLength: 128 }),
});

/** A device's tags. */
export const Tags = z.array(z.string());

/** How many devices report a version (null: none reported). */
export const VersionCount = z.object({ version: z.string().nullable(), devices: z.int() });
export type VersionCount = z.infer<typeof VersionCount>;

const versionsRow = {
  devices: z.int(),
  versions: z.array(VersionCount).describe("the most common first, at most 20"),
  others: z.int().describe("devices on versions beyond those listed"),
};
/** Which versions run where: per device type and per group, of the devices (and groups) the caller may read. */
export const FleetVersions = z
  .object({
    by_device_type: z.array(z.object({ device_type: z.string().nullable(), ...versionsRow })).describe("the most devices first, at most 200"),
    by_group: z.array(z.object({ group: z.int(), name: z.string().nullable(), ...versionsRow })).describe("the most devices first, at most 200; a device may be in several"),
  })
  .meta({ id: "FleetVersions" });
export type FleetVersions = z.infer<typeof FleetVersions>;
