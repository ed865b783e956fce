/*
 * Device targets of a test run (docs/device-tests.md): `device:<mac or name>`, `group:<v2 group
 * name>` (update/groups/name.ts) and `tag:<tag>` in a config entry's `machines:` or a trigger's `machine_target`, resolved
 * to managed devices when the run is triggered, with the caller's permissions.
 */
import { sql, type Expression, type SqlBool } from "kysely";
import type { Store } from "../../db/store.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { countDevices, deviceNames, getDeviceByMac, listDevices, tagCounts, type DeviceRow } from "../../update/devices/devices.ts";
import { groupMemberCounts, listGroups } from "../../update/groups/groups.ts";
import { groupNameOf } from "../../update/groups/name.ts";
import { allowed, permissionFilter } from "../../update/permissions/permissions.ts";
import { DEVICE_TARGET } from "./names.ts";

/** A device a run goes to. */
export interface TargetDevice {
  id: number;
  mac: string;
  name: string;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** Both conditions, or the one there is. */
function both(a: Expression<SqlBool> | undefined, b: Expression<SqlBool> | undefined): Expression<SqlBool> | undefined {
  return a && b ? sql<SqlBool>`(${a}) AND (${b})` : (a ?? b);
}

/** The devices `identity` may read among those matching `condition` (on alias `d`). */
function readable(store: Store, identity: Identity, condition: Expression<SqlBool>): Promise<DeviceRow[]> {
  return listDevices(store, both(condition, permissionFilter(identity, "device", "d")));
}

/** One target's devices; a 4xx naming the target when it names nothing the caller may see. */
async function resolveOne(store: Store, identity: Identity, target: string, prefix: string): Promise<DeviceRow[]> {
  const [, kind, value] = DEVICE_TARGET.exec(target)!;
  if (kind === "device") {
    const mac = value.toLowerCase();
    const byMac = MAC.test(mac) ? await getDeviceByMac(store.query, mac) : undefined;
    const found = await readable(store, identity, byMac ? sql<SqlBool>`d.id = ${byMac.id}` : sql<SqlBool>`d.name = ${value}`);
    if (found.length === 0) throw new LabgateError("not_found", `unknown device '${value}' (${target})`);
    if (found.length > 1) throw new LabgateError("invalid", `${target}: ${found.length} devices are named '${value}': name it by MAC address`);
    return found;
  }
  if (kind === "group") {
    const groups = (await listGroups(store.query, permissionFilter(identity, "group", "g"))).filter((g) => groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) === value);
    if (groups.length === 0) throw new LabgateError("not_found", `unknown group '${value}' (${target})`);
    const ids = groups.map((g) => g.id);
    const devices = await readable(store, identity, sql<SqlBool>`d.id IN (SELECT gd.device_id FROM group_devices gd WHERE gd.group_id IN (${sql.join(ids)}))`);
    if (devices.length === 0) throw new LabgateError("unprocessable", `group '${value}' has no devices (${target})`);
    return devices;
  }
  const devices = await readable(store, identity, sql<SqlBool>`d.id IN (SELECT dt.device_id FROM device_tags dt WHERE dt.tag = ${value})`);
  if (devices.length === 0) throw new LabgateError("not_found", `no device is tagged '${value}' (${target})`);
  return devices;
}

/**
 * Resolves every target, then checks that `identity` may run tests on each device found (the
 * `test` permission, or svc_admin_rw): a 403 naming every device it may not.
 * Returns target -> its devices (in id order).
 */
export async function resolveTargets(store: Store, identity: Identity | undefined, targets: string[], prefix: string): Promise<Map<string, TargetDevice[]>> {
  if (!identity || identity.kind !== "mgmt") throw new LabgateError("forbidden", "running tests on devices needs a signed-in user with the test permission on them");
  const out = new Map<string, TargetDevice[]>();
  const refused = new Map<number, string>();
  for (const target of targets) {
    const devices = await resolveOne(store, identity, target, prefix);
    out.set(target, devices.map((d) => ({ id: d.id, mac: d.mac_address, name: d.name || d.mac_address })));
    for (const d of devices) if (!(await allowed(store.query, identity, "device", d.id, "test"))) refused.set(d.id, d.name || d.mac_address);
  }
  if (refused.size > 0) throw new LabgateError("forbidden", `no test permission on device${refused.size > 1 ? "s" : ""} ${[...refused.values()].map((n) => `'${n}'`).join(", ")}`);
  return out;
}

/** What the console offers as places to run: the devices, groups and tags `identity` may run tests on. */
export interface TestableTargets {
  /** At most `limit` devices (by name); `total`: how many in all. */
  devices: TargetDevice[];
  total: number;
  /** Groups with at least one such device, and how many. */
  groups: Array<{ name: string; devices: number }>;
  tags: Array<{ tag: string; devices: number }>;
}

/** The devices `identity` may read and run tests on, as SQL on alias `d` (undefined: all, an admin). */
function testableFilter(identity: Identity): Expression<SqlBool> | undefined {
  return both(permissionFilter(identity, "device", "d"), permissionFilter(identity, "device", "d", "test"));
}

export async function testableTargets(store: Store, identity: Identity | undefined, prefix: string, limit = 1000): Promise<TestableTargets> {
  if (!identity || identity.kind !== "mgmt") return { devices: [], total: 0, groups: [], tags: [] };
  const filter = testableFilter(identity);
  const devices = (await deviceNames(store.query, filter, limit)).map((d) => ({ id: d.id, mac: d.mac_address, name: d.name || d.mac_address }));
  const total = await countDevices(store.query, filter);
  const groups = await groupMemberCounts(store.query, filter, permissionFilter(identity, "group", "g"));
  const named = new Map<string, number>();
  for (const g of groups) {
    const name = groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix);
    if (name !== undefined) named.set(name, (named.get(name) ?? 0) + g.n);
  }
  const tags = await tagCounts(store.query, filter);
  return {
    devices,
    total,
    groups: [...named].map(([name, n]) => ({ name, devices: n })).sort((a, b) => (a.name < b.name ? -1 : 1)),
    tags: tags.map((t) => ({ tag: t.tag, devices: t.n })),
  };
}
