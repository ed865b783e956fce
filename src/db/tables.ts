/**
 * The module (a folder under src/) that owns each table: only its files hold statements that read a
 * table first or write it, so a table's rules and its row types have one home and each module's SQL
 * can be moved to another engine on its own. Other modules call the owner's functions; a statement
 * may still join or filter on another module's tables read-only (a permission filter, a list's counts),
 * because answering in one query is the point of a database. test/foundation/architecture.test.ts checks
 * it, and docs/decisions/0021-tables-have-one-owner.md says why.
 */
export const TABLE_OWNERS: Readonly<Record<string, string>> = {
  schema_migrations: "src/db",
  _labgate_meta: "src/db",
  sqlite_master: "src/db",
  settings: "src/db",
  accounts: "src/accounts",
  cluster_devices: "src/cluster",
  cluster_nodes: "src/cluster",
  audit_log: "src/audit",
  access_generation: "src/auth",
  revoked_tokens: "src/auth",
  revoked_users: "src/auth",
  lab_boards: "src/lab",
  lab_console_spans: "src/lab",
  lab_open_spans: "src/lab",
  lab_power: "src/lab",
  lab_reservations: "src/lab",
  testrun_runs: "src/testrun/runs",
  testrun_triggers: "src/testrun/runs",
  testrun_device_results: "src/testrun/runs",
  action_log: "src/update/actions",
  ddi_actions: "src/update/ddi",
  ddi_artifacts: "src/update/ddi",
  ddi_targets: "src/update/ddi",
  deployments: "src/update/deployments",
  deployment_devices: "src/update/deployments",
  update_history: "src/update/deployments",
  devices: "src/update/devices",
  device_tags: "src/update/devices",
  groups: "src/update/groups",
  group_devices: "src/update/groups",
  group_packages: "src/update/groups",
  device_logs: "src/update/logs",
  packages: "src/update/packages",
  permissions: "src/update/permissions",
  progress: "src/update/progress",
  registrations: "src/update/registration",
};
