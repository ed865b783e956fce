/*
 * What a deployment of a version to a group would run into before it is made
 * (GET /api/v2/deployments/preflight): devices that require signatures and would refuse its packages.
 */
import type { AppContext, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { signatureRequirements } from "../devices/devices.ts";
import { packageKeys, packagesOfVersion } from "../packages/packages.ts";
import { signatureWarnings } from "../packages/signing.ts";
import { authorize } from "../permissions/permissions.ts";
import type * as z from "zod";
import type { DeploymentPreflight, DeploymentPreflightQuery } from "./schema.ts";

/** The caller (read on the group) asks what deploying `version` (with the `packages` it would assign first) would meet. */
export async function preflight({ store }: Pick<AppContext, "store">, prefix: string, identity: Identity, query: z.output<typeof DeploymentPreflightQuery>): Promise<DeploymentPreflight> {
  if (query.group === undefined || query.version === undefined) throw new LabgateError("invalid", 'query parameters "group" and "version" are required');
  await authorize(store.query, identity, "group", query.group, "read");
  const extra = query.packages ? query.packages.split(",").map(Number) : [];
  const packages = (await packagesOfVersion(store.query, query.group, query.version, extra)).map((row) => ({ ...row, metadata: JSON.parse(row.metadata) as Record<string, unknown> }));
  return { warnings: signatureWarnings(packageKeys(prefix), packages, await signatureRequirements(store, query.group, prefix)) };
}
