/*
 * Who may stop a run on managed devices (docs/device-tests.md): besides the tests scopes, the
 * permissions its devices require (src/update/permissions/permissions.ts); what a reader sees of
 * one is src/testrun/runs/sight.ts's. A run on no device needs the scopes alone.
 */
import type { Queries } from "../../db/store.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { getDeviceByMac } from "../../update/devices/devices.ts";
import { allowed, bypasses, MSG_FORBIDDEN } from "../../update/permissions/permissions.ts";
import type { Permission } from "../../update/permissions/schema.ts";
import type { TestPlan } from "../plan.ts";
import type { DeviceProgress } from "../schema.ts";

/** Whether `identity` holds `perm` on the device with this MAC (a device gone since: no one but an admin). */
async function onDevice(q: Queries, identity: Identity | undefined, mac: string, perm: Permission): Promise<boolean> {
  if (!identity) return false;
  const device = await getDeviceByMac(q, mac);
  return device ? allowed(q, identity, "device", device.id, perm) : bypasses(identity, perm);
}

/**
 * Throws 403 unless `identity` may stop the run (or delete it): `test` on each of its devices, what
 * starting it needed; a deployment's validation run, whose end decides the device's update (a
 * failure rolls it back), `update` on its device. Without a caller, nobody may.
 */
export async function authorizeStop(q: Queries, identity: Identity | undefined, run: { devices: DeviceProgress[] | null }, plan: TestPlan | undefined): Promise<void> {
  if (run.devices === null) return;
  const validation = plan?.validates !== undefined;
  const perm: Permission = validation ? "update" : "test";
  const may = await Promise.all(run.devices.map((d) => onDevice(q, identity, d.mac, perm)));
  if (may.every(Boolean)) return;
  throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: ${validation ? "a deployment's validation run needs update" : "this run needs test"} on each of its devices`);
}
