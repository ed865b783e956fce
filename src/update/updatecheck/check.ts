import type { DeviceIdentity } from "../../auth/tokens.ts";
import { firstMessage } from "../../util/shapes.ts";
import type { AppContext } from "../../app/context.ts";
import { objectLink } from "../../storage/links.ts";
import { deltaOf, packageKeys } from "../packages/packages.ts";
import type { UpdateProgress } from "../progress/progress.ts";
import { resolveInPlan, retarget, type UpdateCatalog } from "./catalog.ts";
import { dateOf } from "../../util/time.ts";
import type { Metadata } from "../devices/metadata.ts";
import { UpdateCheck, type UpdateOffer } from "./schema.ts";

/** The deployment and attempt an offer belongs to: its outcome names them (docs/device-protocol.md). */
export interface OfferTag {
  deployment: number;
  attempt: number;
}

/**
 * What an update check does for a device (deployments/service.ts): "hold", no update; or the
 * deployment's target, and `recordOffer` to record (durably) what the resolver found (`offered`: the
 * offered package's version), answering the offer's tag, or "hold" when the offer could not be
 * recorded. An offer it writes starts the device's progress record in the same transaction.
 */
export type OfferDecision = "hold" | { target: string; recordOffer(offered: string | undefined, deviceVersion: string, mac: string): OfferTag | "hold" | Promise<OfferTag | "hold" | undefined> | undefined };

/** The deployments as the update check sees them: undefined, the group's policy (`policyTarget`) as usual. */
export interface Steering {
  steer(deviceId: number, groupId: number, now: number, policyTarget: string | undefined): OfferDecision | undefined;
}

const keyCache = new Map<string, { version: string; devtype: string; mac: string }>();
export const checkKeys = (prefix: string) => {
  let keys = keyCache.get(prefix);
  if (!keys) {
    const names = packageKeys(prefix);
    keyCache.set(prefix, (keys = { version: names.version, devtype: names.devtype, mac: `${prefix}.hardware.macaddr` }));
  }
  return keys;
};

/** Validates an update-check body; returns the metadata, or the 400 message (all missing keys named at once). */
export function checkBody(body: unknown, prefix: string): Metadata | string {
  const result = UpdateCheck(prefix).safeParse(body);
  if (result.success) return result.data;
  const missing = result.error.issues.filter((i) => i.code === "invalid_type" && i.path.length === 1 && (body as Record<string, unknown>)[i.path[0] as string] === undefined);
  if (missing.length) return `schema validation failed: missing required key${missing.length > 1 ? "s" : ""}: ${missing.map((i) => String(i.path[0])).join(", ")}`;
  return firstMessage(result.error);
}

/** Same MAC, whatever the case or separator style the device uses. */
export const sameMac = (a: string, b: string): boolean => a.toLowerCase().replace(/[-.]/g, ":") === b.toLowerCase().replace(/[-.]/g, ":");

/**
 * The update check for the token's device (never the body's MAC): its active group
 * (lowest priority value), that group's policy target and packages, and the resolver. A device
 * in a started phase of a deployment of that group gets the deployment's target instead (or
 * nothing, once it finished there; deployments/service.ts). On an offer the device's progress
 * record starts at 0. Undefined means "no update".
 */
export async function updateCheck(
  ctx: Pick<AppContext, "clock" | "config" | "store" | "tokens" | "objects">,
  progress: UpdateProgress,
  catalog: UpdateCatalog,
  deployments: Steering | undefined,
  device: DeviceIdentity,
  metadata: Metadata,
  base: string,
  now = dateOf(ctx.clock),
): Promise<UpdateOffer | undefined> {
  const keys = checkKeys(ctx.config.prefix);
  const groupId = await catalog.activeGroup(device.deviceId);
  if (groupId === null) return undefined;
  const groupwide = await catalog.groupPlan(groupId, keys.version);
  if (!groupwide) return undefined;
  const steer = deployments?.steer(device.deviceId, groupId, now.getTime(), groupwide.target);
  if (steer === "hold") return undefined;
  const plan = steer ? retarget(groupwide, steer.target) : groupwide;
  const index = plan.target === undefined || plan.packages.length === 0 ? undefined : resolveInPlan(plan, metadata, keys);
  const pkg = index === undefined ? undefined : plan.packages[index];
  // The deployment's record of the answer is durable before the device hears it; an offer it
  // writes holds the progress record too, which the start below then finds written.
  const tag = steer ? await steer.recordOffer(pkg?.version, String(metadata[keys.version]), device.mac) : undefined;
  if (pkg === undefined || tag === "hold") return undefined;
  await progress.recordUpdateStart(device.deviceId, device.mac, pkg.version, now);
  const offer: UpdateOffer = { id: pkg.id, created: pkg.created, sha256: pkg.sha256, uri: await objectLink(ctx, base, pkg.storageName), version: pkg.version };
  // A delta the gateway made for the version the device runs goes beside the full package, which stays the fallback.
  const found = deltaOf(ctx.store, pkg.id, String(metadata[keys.version]));
  const delta = found instanceof Promise ? await found : found;
  if (delta) offer.delta = { id: delta.id, sha256: delta.sha256, size: delta.size, uri: await objectLink(ctx, base, delta.storage_name), base_version: String(metadata[keys.version]) };
  if (tag) Object.assign(offer, tag);
  return offer;
}
