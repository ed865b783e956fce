/*
 * Device targets of a test run (docs/device-tests.md): `device:<mac or name>`, `group:<v2 group
 * name>` (update/groups/name.ts) and `tag:<tag>` in a config entry's `machines:` or a trigger's `machine_target`, resolved
 * to managed devices when the run is triggered, with the caller's permissions.
 */
import type { Database } from "../../db/index.ts";
import type { Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { countDevices, deviceNames, getDeviceByMac, listDevices, tagCounts, type DeviceRow } from "../../update/devices/devices.ts";
import { groupMemberCountsSync, listGroupsSync } from "../../update/groups/legacy.ts";
import { groupNameOf } from "../../update/groups/name.ts";
import { permissionFilterSql } from "../../update/permissions/permissions.ts";
import { allowedSync } from "../../update/permissions/legacy.ts";
import { DEVICE_TARGET } from "./names.ts";

/** A device a run goes to. */
export interface TargetDevice {
  id: number;
  mac: string;
  name: string;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** The devices `identity` may read among those matching `condition` (SQL on alias `d`). */
function readable(db: Database, identity: Identity, condition: string, params: (string | number)[]): DeviceRow[] {
  const filter = permissionFilterSql(identity, "device", "d");
  const sql = filter ? `(${condition}) AND (${filter.sql})` : condition;
  return listDevices(db, { sql, params: [...params, ...(filter?.params ?? [])] });
}

/** One target's devices; a 4xx naming the target when it names nothing the caller may see. */
function resolveOne(db: Database, identity: Identity, target: string, prefix: string): DeviceRow[] {
  const [, kind, value] = DEVICE_TARGET.exec(target)!;
  if (kind === "device") {
    const mac = value.toLowerCase();
    const byMac = MAC.test(mac) ? getDeviceByMac(db, mac) : undefined;
    const found = byMac ? readable(db, identity, "d.id = ?", [byMac.id]) : readable(db, identity, "d.name = ?", [value]);
    if (found.length === 0) throw new LabgateError("not_found", `unknown device '${value}' (${target})`);
    if (found.length > 1) throw new LabgateError("invalid", `${target}: ${found.length} devices are named '${value}': name it by MAC address`);
    return found;
  }
  if (kind === "group") {
    const filter = permissionFilterSql(identity, "group", "g");
    const groups = listGroupsSync(db, filter).filter((g) => groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) === value);
    if (groups.length === 0) throw new LabgateError("not_found", `unknown group '${value}' (${target})`);
    const devices = readable(db, identity, `d.id IN (SELECT gd.device_id FROM group_devices gd WHERE gd.group_id IN (${groups.map(() => "?").join(", ")}))`, groups.map((g) => g.id));
    if (devices.length === 0) throw new LabgateError("unprocessable", `group '${value}' has no devices (${target})`);
    return devices;
  }
  const devices = readable(db, identity, "d.id IN (SELECT dt.device_id FROM device_tags dt WHERE dt.tag = ?)", [value]);
  if (devices.length === 0) throw new LabgateError("not_found", `no device is tagged '${value}' (${target})`);
  return devices;
}

/**
 * Resolves every target, then checks that `identity` may run tests on each device found (the
 * `test` permission, or svc_admin_rw): a 403 naming every device it may not.
 * Returns target -> its devices (in id order).
 */
export function resolveTargets(db: Database, identity: Identity | undefined, targets: string[], prefix: string): Map<string, TargetDevice[]> {
  if (!identity || identity.kind !== "mgmt") throw new LabgateError("forbidden", "running tests on devices needs a signed-in user with the test permission on them");
  const out = new Map<string, TargetDevice[]>();
  const refused = new Map<number, string>();
  for (const target of targets) {
    const devices = resolveOne(db, identity, target, prefix);
    out.set(target, devices.map((d) => ({ id: d.id, mac: d.mac_address, name: d.name || d.mac_address })));
    for (const d of devices) if (!allowedSync(db, identity, "device", d.id, "test")) refused.set(d.id, d.name || d.mac_address);
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
function testableFilter(identity: Identity): { sql: string; params: (string | number)[] } | undefined {
  const read = permissionFilterSql(identity, "device", "d");
  const test = permissionFilterSql(identity, "device", "d", "test");
  if (!read || !test) return read ?? test;
  return { sql: `(${read.sql}) AND (${test.sql})`, params: [...read.params, ...test.params] };
}

export function testableTargets(db: Database, identity: Identity | undefined, prefix: string, limit = 1000): TestableTargets {
  if (!identity || identity.kind !== "mgmt") return { devices: [], total: 0, groups: [], tags: [] };
  const filter = testableFilter(identity);
  const devices = deviceNames(db, filter, limit).map((d) => ({ id: d.id, mac: d.mac_address, name: d.name || d.mac_address }));
  const total = countDevices(db, filter);
  const groups = groupMemberCountsSync(db, filter, permissionFilterSql(identity, "group", "g"));
  const named = new Map<string, number>();
  for (const g of groups) {
    const name = groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix);
    if (name !== undefined) named.set(name, (named.get(name) ?? 0) + g.n);
  }
  const tags = tagCounts(db, filter);
  return {
    devices,
    total,
    groups: [...named].map(([name, n]) => ({ name, devices: n })).sort((a, b) => (a.name < b.name ? -1 : 1)),
    tags: tags.map((t) => ({ tag: t.tag, devices: t.n })),
  };
}
