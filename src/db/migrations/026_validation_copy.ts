import type { Migration } from "../migrate.ts";

/*
 * A deployment runs its validation config as it was when it was made (docs/device-tests.md,
 * src/testrun/devices/validation.ts):
 *
 *   deployments.validation_copy  -- JSON {config, suite, files, modules}: the config's files and the
 *                                   script modules its entries use, at creation; what each device
 *                                   runs. NULL: no validation (or one made before this column,
 *                                   pinned at the next start)
 */
export const m026ValidationCopy: Migration = {
  version: 26,
  name: "validation_copy",
  sql: [`ALTER TABLE deployments ADD COLUMN validation_copy TEXT`],
};
