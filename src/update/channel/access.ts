import type { Database } from "../../db/index.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { getDeviceByMac, macsMatching, type DeviceRow } from "../devices/devices.ts";
import { MSG_FORBIDDEN, notFoundMessage, permissionFilterSql } from "../permissions/permissions.ts";
import { authorizeSync, hasPermissionRowsSync } from "../permissions/legacy.ts";
import type { Permission } from "../permissions/schema.ts";

/**
 * The device named by MAC in the path, with `perm` checked on it. Without read the device is
 * hidden (404, like a missing one); with read but not `perm`, 403.
 */
export function deviceByMac(db: Database, identity: Identity, mac: string, perm: Permission): DeviceRow {
  const device = getDeviceByMac(db, mac);
  if (device) {
    authorizeSync(db, identity, "device", device.id, "read");
    if (perm !== "read") authorizeSync(db, identity, "device", device.id, perm);
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
export function devicesByMac(db: Database, identity: Identity, macs: readonly string[], perm: Permission): Map<string, LabgateError | undefined> {
  const hidden = new LabgateError("not_found", notFoundMessage("device"));
  const refused = new LabgateError("forbidden", MSG_FORBIDDEN);
  const verdicts = new Map<string, LabgateError | undefined>(macs.map((mac) => [mac, hidden]));
  const read = permissionFilterSql(identity, "device", "d", "read");
  if (read && (identity.kind !== "mgmt" || !hasPermissionRowsSync(db, identity.user))) return verdicts;
  const wanted = permissionFilterSql(identity, "device", "d", perm) ?? { sql: "1", params: [] };
  const readable = read ?? { sql: "1", params: [] };
  const rows = macsMatching(db, macs, readable, wanted);
  for (const row of rows) verdicts.set(row.mac_address, row.w ? undefined : refused);
  return verdicts;
}
