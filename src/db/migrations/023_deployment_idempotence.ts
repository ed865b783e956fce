import type { Migration } from "../migrate.ts";

/*
 * What a restart or a report sent again must not lose or repeat (src/update/deployments/):
 *
 *   deployment_devices.validated  -- when the device's validation run passed (NULL: not yet, or
 *                                    none): an installed device without it is validated again
 *                                    after a restart (src/testrun/devices/validation.ts)
 *   update_history.report_id      -- the `id` of the device's update_outcome report that wrote
 *                                    the row (NULL: a row the server decided): a report sent again
 *                                    (its acknowledgement was lost) is recognised and changes nothing
 */
export const m023DeploymentIdempotence: Migration = {
  version: 23,
  name: "deployment_idempotence",
  sql: [
    `ALTER TABLE deployment_devices ADD COLUMN validated TEXT`,
    `ALTER TABLE update_history ADD COLUMN report_id TEXT`,
    `CREATE UNIQUE INDEX update_history_report ON update_history(device_id, report_id) WHERE report_id IS NOT NULL`,
  ],
};
