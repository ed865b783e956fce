/*
 * Which versions run in each group (GET /api/v2/devices/versions, beside src/update/devices/versions.ts
 * by device type): the groups and members the caller may read, within the same bounds.
 */
import type { Database } from "../../db/index.ts";
import type { SqlFilter } from "../permissions/permissions.ts";
import { summarise, versionColumn, where, type Counted } from "../devices/versions.ts";
import type { FleetVersions } from "../devices/schema.ts";
import { groupNameOf } from "./name.ts";

/** The groups (alias g, narrowed by `groups`) by their members' (alias d, narrowed by `devices`) versions. */
export function versionsByGroup(db: Database, prefix: string, groups: SqlFilter | undefined, devices: SqlFilter | undefined): FleetVersions["by_group"] {
  const byGroup = where(groups, devices);
  const inGroups = summarise(
    db.all<Counted>(`SELECT g.id AS key, ${versionColumn(prefix)} AS version, COUNT(*) AS n FROM group_devices gd JOIN groups g ON g.id = gd.group_id JOIN devices d ON d.id = gd.device_id${byGroup.sql} GROUP BY g.id, version`, byGroup.params),
  );
  const ids = inGroups.map((g) => Number(g.key));
  const names = new Map(
    ids.length === 0 ? [] : db.all<{ id: number; metadata: string }>(`SELECT id, metadata FROM groups WHERE id IN (${ids.map(() => "?").join(",")})`, ids).map((g) => [g.id, groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) ?? null]),
  );
  return inGroups.map(({ key, ...row }) => ({ group: Number(key), name: names.get(Number(key)) ?? null, ...row }));
}
