// The operations of the areas that still list theirs apart from their routes, for GET
// /api/openapi.json (loaded on its first request: these modules build hundreds of zod schemas that
// a start does not need) and docs/routes.md.
import type { Config } from "../config/config.ts";
import { auditOperations } from "../audit/routes.ts";
import { backupOperations } from "../backup/routes.ts";
import type { Operation } from "../http/openapi.ts";

/** The operations of the areas that do not register theirs with their routes yet (`route`). */
export const listedOperations = (): Operation[] => [
  ...backupOperations,
  ...auditOperations,
];

/** Every operation of the document: the listed ones and those the routers registered (`_config`: what they were registered with). */
export const apiOperations = (_config: Config, registered: readonly Operation[]): Operation[] => [...listedOperations(), ...registered];
