import type { Database } from "../../db/index.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { getDeviceByMac, type DeviceRow } from "../devices/devices.ts";
import { authorize, type Permission } from "../permissions/permissions.ts";

/**
 * PERM-MAC (update-server.md 2.7, 17 item 7): the device named by MAC in the path, with `perm`
 * checked on it. Without read the device is hidden (404, like a missing one); with read but not
 * `perm`, 403.
 */
export function deviceByMac(db: Database, identity: Identity, mac: string, perm: Permission): DeviceRow {
  const device = getDeviceByMac(db, mac);
  if (device) {
    authorize(db, identity, "device", device.id, "read");
    if (perm !== "read") authorize(db, identity, "device", device.id, perm);
  }
  if (!device) throw new LabgateError("not_found", "device does not exist");
  return device;
}
