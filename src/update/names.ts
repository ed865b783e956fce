/**
 * The present names of what the audit log's targets name (`device:4`, `group:1`, `package:7`), so
 * that people read names where entries keep ids. A target that is gone, or of another kind, has
 * none. The audit routes take it as their `names`; one query per kind for a page of entries.
 */
import type { Database } from "../db/index.ts";
import { groupNameOf } from "./groups/name.ts";
import { metaKeys } from "./devices/metadata.ts";

const TARGET = /^(device|group|package):([1-9][0-9]{0,15})$/;

export function targetNames(db: Database, prefix: string, targets: readonly string[]): Map<string, string> {
  const ids: Record<"device" | "group" | "package", number[]> = { device: [], group: [], package: [] };
  for (const target of new Set(targets)) {
    const m = TARGET.exec(target);
    if (m) ids[m[1] as keyof typeof ids].push(Number(m[2]));
  }
  const names = new Map<string, string>();
  const rows = <T>(table: string, columns: string, list: number[]) =>
    list.length === 0 ? [] : db.all<T & { id: number }>(`SELECT id, ${columns} FROM ${table} WHERE id IN (SELECT value FROM json_each(?))`, [JSON.stringify(list)]);
  for (const d of rows<{ name: string }>("devices", "name", ids.device)) if (d.name) names.set(`device:${d.id}`, d.name);
  for (const g of rows<{ metadata: string }>("groups", "metadata", ids.group)) {
    const name = groupNameOf(JSON.parse(g.metadata) as Record<string, unknown>, prefix);
    if (name) names.set(`group:${g.id}`, name);
  }
  const keys = metaKeys(prefix);
  for (const p of rows<{ metadata: string }>("packages", "metadata", ids.package)) {
    const meta = JSON.parse(p.metadata) as Record<string, unknown>;
    names.set(`package:${p.id}`, `${String(meta[keys.version] ?? "?")} · ${String(meta[keys.devtype] ?? "?")}`);
  }
  return names;
}
