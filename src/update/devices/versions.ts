/*
 * Which versions run where (GET /api/v2/devices/versions): the devices the caller may read, counted
 * by reported software version per device type and per group (groups the caller may read).
 * Bounded: at most MAX_ROWS device types and groups (the most devices first), MAX_VERSIONS versions
 * a row (the most common; the rest counted in `others`).
 */
import type { Database } from "../../db/index.ts";
import { groupNameOf } from "../groups/name.ts";
import type { SqlFilter } from "../permissions/permissions.ts";
import { metaKeys } from "./metadata.ts";
import type { FleetVersions, VersionCount } from "./schema.ts";

export const MAX_ROWS = 200;
export const MAX_VERSIONS = 20;

interface Counted {
  key: number | string | null;
  version: string | null;
  n: number;
}

/** Rows of (key, version, n) into rows of their versions, most devices first, within the bounds. */
function summarise(counted: Counted[]): Array<{ key: Counted["key"]; devices: number; versions: VersionCount[]; others: number }> {
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

const where = (...filters: Array<SqlFilter | undefined>) => {
  const present = filters.filter((f): f is SqlFilter => f !== undefined);
  return { sql: present.length ? ` WHERE ${present.map((f) => `(${f.sql})`).join(" AND ")}` : "", params: present.flatMap((f) => f.params) };
};

/** The summary; `devices` narrows the devices (alias d) and `groups` the groups (alias g) to what the caller may read. */
export function fleetVersions(db: Database, prefix: string, devices: SqlFilter | undefined, groups: SqlFilter | undefined): FleetVersions {
  const keys = metaKeys(prefix);
  // The prefix is lowercase letters and digits (config.ts): safe inside a JSON path.
  const version = `json_extract(d.metadata, '$."${keys.version}"')`;
  const type = `json_extract(d.metadata, '$."${keys.devtype}"')`;
  const byType = where(devices);
  const types = summarise(db.all<Counted>(`SELECT ${type} AS key, ${version} AS version, COUNT(*) AS n FROM devices d${byType.sql} GROUP BY key, version`, byType.params));
  const byGroup = where(groups, devices);
  const inGroups = summarise(
    db.all<Counted>(`SELECT g.id AS key, ${version} AS version, COUNT(*) AS n FROM group_devices gd JOIN groups g ON g.id = gd.group_id JOIN devices d ON d.id = gd.device_id${byGroup.sql} GROUP BY g.id, version`, byGroup.params),
  );
  const ids = inGroups.map((g) => Number(g.key));
  const names = new Map(
    ids.length === 0 ? [] : db.all<{ id: number; metadata: string }>(`SELECT id, metadata FROM groups WHERE id IN (${ids.map(() => "?").join(",")})`, ids).map((g) => [g.id, groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) ?? null]),
  );
  return {
    by_device_type: types.map(({ key, ...row }) => ({ device_type: key === null ? null : String(key), ...row })),
    by_group: inGroups.map(({ key, ...row }) => ({ group: Number(key), name: names.get(Number(key)) ?? null, ...row })),
  };
}
