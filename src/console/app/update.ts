/** Pieces the update-server pages share (Devices, a device, Groups, Packages): names and labels. */
import type { Group } from "../../update/groups/schema.ts";
import type { Package } from "../../update/packages/schema.ts";

/** A group's display name: `<prefix>.group.name` (the reference UI's key), else `name`, else the id. */
export const groupName = (g: Group): string => {
  const key = Object.keys(g.metadata).find((k) => k.endsWith(".group.name")) ?? "name";
  return typeof g.metadata[key] === "string" && g.metadata[key] ? String(g.metadata[key]) : `Group ${g.id}`;
};

/** A package as one line: version, device type and id. */
export const packageLabel = (p: Package, prefix: string): string =>
  `${String(p.metadata[`${prefix}.software.version`] ?? "?")} · ${String(p.metadata[`${prefix}.hardware.devtype`] ?? "?")} (#${p.id})`;
