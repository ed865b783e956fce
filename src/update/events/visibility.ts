import type { ManagementIdentity } from "../../auth/tokens.ts";
import type { Queries } from "../../db/store.ts";
import { deviceMacs } from "../devices/devices.ts";
import { groupIdsMatching } from "../groups/groups.ts";
import { bypasses, permissionFilter } from "../permissions/permissions.ts";
import type { DeviceEvent } from "./broadcaster.ts";

/** What a user may read of the live events: the devices by MAC address and the groups by id, or "all" (admin reads). */
export type Visible = { devices: ReadonlySet<string>; groups: ReadonlySet<number> } | "all";

/** What a stream whose token or account no longer allows it sees (its watch ends it). */
export const NOTHING: Visible = { devices: new Set(), groups: new Set() };

/** Whether an event is one the reader may see: a deployment's by its group, the others by their device. */
export function shows(sees: Visible, event: DeviceEvent): boolean {
  if (sees === "all") return true;
  if (event.event === "deployment" || event.event === "deployment_device") return sees.groups.has(event.data.group);
  return sees.devices.has(String(event.data.device));
}

/**
 * What `identity` may read now (NOTHING for a caller that is no longer allowed, given as the
 * reason string): the sets are made once per user and scopes in `shared`, since every stream of a
 * user sees the same.
 */
export async function visibleTo(q: Queries, identity: ManagementIdentity | string, shared: Map<string, Visible>): Promise<Visible> {
  if (typeof identity === "string") return NOTHING;
  if (bypasses(identity, "read")) return "all";
  const key = `${identity.user}\n${[...identity.scopes].sort().join(" ")}`;
  let sees = shared.get(key);
  if (sees === undefined) {
    sees = {
      devices: await deviceMacs(q, permissionFilter(identity, "device", "d")!),
      groups: new Set(await groupIdsMatching(q, permissionFilter(identity, "group", "g")!)),
    };
    shared.set(key, sees);
  }
  return sees;
}
