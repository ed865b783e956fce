import type { Migration } from "../migrate.ts";

/*
 * Validation of updates by a test run (docs/device-tests.md, src/testrun/devices/validation.ts):
 *
 *   deployments.validation  -- JSON {config, suite}: run on each device once it installed; NULL: none
 */
export const m021DeploymentValidation: Migration = {
  version: 21,
  name: "deployment_validation",
  sql: [`ALTER TABLE deployments ADD COLUMN validation TEXT`],
};
