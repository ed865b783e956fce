/*
 * Which versions run where (GET /api/v2/devices/versions): the devices the caller may read, counted
 * by reported software version per device type (here) and per group (src/update/groups/versions.ts).
 * Bounded: at most MAX_ROWS device types and groups (the most devices first), MAX_VERSIONS versions
 * a row (the most common; the rest counted in `others`).
 */
import { sql } from "kysely";
import { metadataText } from "../../db/dialect.ts";
import type { Store } from "../../db/store.ts";
import type { DeviceFilter } from "./devices.ts";
import { metaKeys } from "./metadata.ts";
import type { FleetVersions, VersionCount } from "./schema.ts";

export const MAX_ROWS = 200;
export const MAX_VERSIONS = 20;

export interface Counted {
  key: number | string | null;
  version: string | null;
  n: number;
}

/** Rows of (key, version, n) into rows of their versions, most devices first, within the bounds. */
export function summarise(counted: Counted[]): Array<{ key: Counted["key"]; devices: number; versions: VersionCount[]; others: number }> {
  const rows = new Map<Counted["key"], { key: Counted["key"]; devices: number; versions: VersionCount[]; others: number }>();
  for (const c of counted) {
    const row = rows.get(c.key) ?? { key: c.key, devices: 0, versions: [], others: 0 };
    row.devices += c.n;
    row.versions.push({ version: c.version, devices: c.n });
    rows.set(c.key, row);
  }
  return [...rows.values()]
    .sort((a, b) => b.devices - a.devices || String(a.key).localeCompare(String(b.key)))
    .slice(0, MAX_ROWS)
    .map((row) => {
      const versions = row.versions.sort((a, b) => b.devices - a.devices || String(a.version).localeCompare(String(b.version), undefined, { numeric: true }));
      const kept = versions.slice(0, MAX_VERSIONS);
      return { ...row, versions: kept, others: versions.slice(MAX_VERSIONS).reduce((n, v) => n + v.devices, 0) };
    });
}

/** The devices (alias d; `devices` narrows them to what the caller may read) by device type and version. */
export async function versionsByDeviceType(store: Pick<Store, "engine" | "query">, prefix: string, devices: DeviceFilter | undefined): Promise<FleetVersions["by_device_type"]> {
  const keys = metaKeys(prefix);
  const type = metadataText(store.engine, "d.metadata", keys.devtype);
  const version = metadataText(store.engine, "d.metadata", keys.version);
  const counted = await store.query
    .selectFrom("devices as d")
    .select((eb) => [type.as("key"), version.as("version"), eb.fn.countAll<number>().as("n")])
    .$if(devices !== undefined, (qb) => qb.where(devices!))
    // By the selected names: PostgreSQL cannot tell two parameterised expressions equal.
    .groupBy([sql.ref("key"), sql.ref("version")])
    .execute();
  const types = summarise(counted.map((c) => ({ key: c.key, version: c.version, n: Number(c.n) })));
  return types.map(({ key, ...row }) => ({ device_type: key === null ? null : String(key), ...row }));
}
