/*
 * Which versions run in each group (GET /api/v2/devices/versions, beside src/update/devices/versions.ts
 * by device type): the groups and members the caller may read, within the same bounds.
 */
import { sql, type Expression, type SqlBool } from "kysely";
import type { Store } from "../../db/store.ts";
import { metadataText } from "../../db/dialect.ts";
import { summarise, type Counted } from "../devices/versions.ts";
import { metaKeys } from "../devices/metadata.ts";
import type { FleetVersions } from "../devices/schema.ts";
import { groupNameOf } from "./name.ts";

/** The groups (alias g, narrowed by `groups`) by their members' (alias d, narrowed by `devices`) versions. */
export async function versionsByGroup(store: Store, prefix: string, groups: Expression<SqlBool> | undefined, devices: Expression<SqlBool> | undefined): Promise<FleetVersions["by_group"]> {
  const version = metadataText(store.engine, "d.metadata", metaKeys(prefix).version);
  const counted: Counted[] = await store.query
    .selectFrom("group_devices as gd")
    .innerJoin("groups as g", "g.id", "gd.group_id")
    .innerJoin("devices as d", "d.id", "gd.device_id")
    .select((eb) => ["g.id as key", version.as("version"), eb.fn.countAll<number>().as("n")])
    .$if(groups !== undefined, (qb) => qb.where(groups!))
    .$if(devices !== undefined, (qb) => qb.where(devices!))
    .groupBy(["g.id", sql`version`])
    .execute();
  const inGroups = summarise(counted);
  const ids = inGroups.map((g) => Number(g.key));
  const rows = ids.length === 0 ? [] : await store.query.selectFrom("groups").select(["id", "metadata"]).where("id", "in", ids).execute();
  const names = new Map(rows.map((g) => [g.id, groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix) ?? null]));
  return inGroups.map(({ key, ...row }) => ({ group: Number(key), name: names.get(Number(key)) ?? null, ...row }));
}
