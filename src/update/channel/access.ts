import type { Queries } from "../../db/store.ts";
import { sql, type SqlBool } from "kysely";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { getDeviceByMac, macsMatching, type DeviceRow } from "../devices/devices.ts";
import { authorize, hasPermissionRows, MSG_FORBIDDEN, notFoundMessage, permissionFilter } from "../permissions/permissions.ts";
import type { Permission } from "../permissions/schema.ts";

/**
 * The device named by MAC in the path, with `perm` checked on it. Without read the device is
 * hidden (404, like a missing one); with read but not `perm`, 403.
 */
export async function deviceByMac(q: Queries, identity: Identity, mac: string, perm: Permission): Promise<DeviceRow> {
  const device = await getDeviceByMac(q, mac);
  if (device) {
    await authorize(q, identity, "device", device.id, "read");
    if (perm !== "read") await authorize(q, identity, "device", device.id, perm);
  }
  if (!device) throw new LabgateError("not_found", "device does not exist");
  return device;
}

/**
 * `deviceByMac` for many MACs at once (a fan-out), in one query whatever their number: per MAC the
 * error deviceByMac would throw (404 unknown or hidden, 403 without `perm`), or undefined when
 * `identity` may go ahead. Only the devices the caller may read come back from the database, and
 * a caller without any permission row gets its 404s without a query over the devices.
 */
export async function devicesByMac(q: Queries, identity: Identity, macs: readonly string[], perm: Permission): Promise<Map<string, LabgateError | undefined>> {
  const hidden = new LabgateError("not_found", notFoundMessage("device"));
  const refused = new LabgateError("forbidden", MSG_FORBIDDEN);
  const verdicts = new Map<string, LabgateError | undefined>(macs.map((mac) => [mac, hidden]));
  const read = permissionFilter(identity, "device", "d", "read");
  if (read && (identity.kind !== "mgmt" || !(await hasPermissionRows(q, identity.user)))) return verdicts;
  const everything = sql<SqlBool>`1 = 1`;
  const rows = await macsMatching(q, macs, read ?? everything, permissionFilter(identity, "device", "d", perm) ?? everything);
  for (const row of rows) verdicts.set(row.mac_address, row.w ? undefined : refused);
  return verdicts;
}
