/**
 * The present names of what the audit log's targets name (`device:4`, `group:1`, `package:7`), so
 * that people read names where entries keep ids. A target that is gone, or of another kind, has
 * none. The audit routes take it as their `names`; one query per kind for a page of entries.
 */
import type { Queries } from "../db/store.ts";
import { groupNameOf } from "./groups/name.ts";
import { metaKeys } from "./devices/metadata.ts";

const TARGET = /^(device|group|package):([1-9][0-9]{0,15})$/;

export async function targetNames(q: Queries, prefix: string, targets: readonly string[]): Promise<Map<string, string>> {
  const ids: Record<"device" | "group" | "package", number[]> = { device: [], group: [], package: [] };
  for (const target of new Set(targets)) {
    const m = TARGET.exec(target);
    if (m) ids[m[1] as keyof typeof ids].push(Number(m[2]));
  }
  const names = new Map<string, string>();
  const [devices, groups, packages] = await Promise.all([
    ids.device.length === 0 ? [] : q.selectFrom("devices").select(["id", "name"]).where("id", "in", ids.device).execute(),
    ids.group.length === 0 ? [] : q.selectFrom("groups").select(["id", "metadata"]).where("id", "in", ids.group).execute(),
    ids.package.length === 0 ? [] : q.selectFrom("packages").select(["id", "metadata"]).where("id", "in", ids.package).execute(),
  ]);
  for (const d of devices) if (d.name) names.set(`device:${d.id}`, d.name);
  for (const g of groups) {
    const name = groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix);
    if (name) names.set(`group:${g.id}`, name);
  }
  const keys = metaKeys(prefix);
  for (const p of packages) {
    const meta = JSON.parse(p.metadata) as Record<string, unknown>;
    names.set(`package:${p.id}`, `${String(meta[keys.version] ?? "?")} · ${String(meta[keys.devtype] ?? "?")}`);
  }
  return names;
}
