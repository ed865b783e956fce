/*
 * Who may stop a run on managed devices (docs/device-tests.md): besides the tests scopes, the
 * permissions its devices require (src/update/permissions/permissions.ts); what a reader sees of
 * one is src/testrun/runs/sight.ts's. A run on no device needs the scopes alone.
 */
import type { Database } from "../../db/index.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { getDeviceByMac } from "../../update/devices/devices.ts";
import { bypasses, MSG_FORBIDDEN } from "../../update/permissions/permissions.ts";
import { allowedSync } from "../../update/permissions/legacy.ts";
import type { Permission } from "../../update/permissions/schema.ts";
import type { TestPlan } from "../plan.ts";
import type { RunRecord } from "../runs/store.ts";

/** Whether `identity` holds `perm` on the device with this MAC (a device gone since: no one but an admin). */
function onDevice(db: Database, identity: Identity | undefined, mac: string, perm: Permission): boolean {
  if (!identity) return false;
  const device = getDeviceByMac(db, mac);
  return device ? allowedSync(db, identity, "device", device.id, perm) : bypasses(identity, perm);
}

/**
 * Throws 403 unless `identity` may stop the run (or delete it): `test` on each of its devices, what
 * starting it needed; a deployment's validation run, whose end decides the device's update (a
 * failure rolls it back), `update` on its device. Without a caller, nobody may.
 */
export function authorizeStop(db: Database, identity: Identity | undefined, run: RunRecord, plan: TestPlan | undefined): void {
  if (run.devices === null) return;
  const validation = plan?.validates !== undefined;
  const perm: Permission = validation ? "update" : "test";
  if (run.devices.every((d) => onDevice(db, identity, d.mac, perm))) return;
  throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: ${validation ? "a deployment's validation run needs update" : "this run needs test"} on each of its devices`);
}
