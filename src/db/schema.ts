/*
 * Every table's columns, as the numbered migrations leave them (Kysely's table types: a row read is
 * `Selectable<XTable>`, one written `Insertable<XTable>`): written by npm run db-schema from
 * the embedded schema (test/foundation/db-schema.test.ts fails when it is stale), so a migration
 * and the types that query the table cannot disagree. Both engines have these columns.
 */
import type { Generated } from "kysely";

/** `_labgate_meta`, owned by src/db. */
export interface LabgateMetaTable {
  key: string;
  value: string;
}

/** `access_generation`, owned by src/auth. */
export interface AccessGenerationTable {
  n: number;
}

/** `accounts`, owned by src/accounts. */
export interface AccountsTable {
  name: string;
  password_hash: string;
  scopes: string;
  disabled: Generated<number>;
  created: string;
  last_login: string | null;
  session_epoch: Generated<number>;
}

/** `action_log`, owned by src/update/actions. */
export interface ActionLogTable {
  seq: Generated<number>;
  id: string;
  mac_address: string;
  action_id: string;
  created: string;
  status: string;
  status_code: number | null;
  output_key: string | null;
  finished: string | null;
  output: Uint8Array | null;
}

/** `audit_log`, owned by src/audit. */
export interface AuditLogTable {
  id: Generated<number>;
  time: string;
  actor_kind: string;
  actor: string;
  token_id: string | null;
  client: string;
  action: string;
  target: string;
  outcome: string;
  detail: string | null;
  spool_id: string | null;
}

/** `cluster_devices`, owned by src/cluster. */
export interface ClusterDevicesTable {
  mac_address: string;
  node: string;
  instance: string;
}

/** `cluster_nodes`, owned by src/cluster. */
export interface ClusterNodesTable {
  name: string;
  instance: string;
  advertise_url: string;
  version: string;
  started_at: number;
  heartbeat_at: number;
  stopped: Generated<number>;
  session_pid: number | null;
  message_format: Generated<number>;
}

/** `ddi_actions`, owned by src/update/ddi. */
export interface DdiActionsTable {
  id: Generated<number>;
  device_id: number;
  deployment_id: number | null;
  attempt: number | null;
  package_id: number;
  version: string;
  state: string;
  result: string | null;
  details: string | null;
  created: string;
  updated: string;
}

/** `ddi_artifacts`, owned by src/update/ddi. */
export interface DdiArtifactsTable {
  package_id: Generated<number>;
  sha1: string;
  md5: string;
}

/** `ddi_targets`, owned by src/update/ddi. */
export interface DdiTargetsTable {
  controller_id: string;
  device_id: number;
  token_sha256: string | null;
  created: string;
  token_set: string;
}

/** `deployment_devices`, owned by src/update/deployments. */
export interface DeploymentDevicesTable {
  deployment_id: number;
  device_id: number;
  phase: number;
  position: number;
  state: string;
  progress: number | null;
  from_version: string | null;
  to_version: string | null;
  reason: string | null;
  output: string | null;
  offered_at: string | null;
  updated: string;
  validated: string | null;
  attempt: Generated<number>;
  failures: Generated<number>;
  offered_version: string | null;
  retry_at: string | null;
}

/** `deployments`, owned by src/update/deployments. */
export interface DeploymentsTable {
  id: Generated<number>;
  group_id: number;
  version: string;
  status: string;
  pause_reason: string | null;
  phases: string;
  current_phase: Generated<number>;
  phase_started: Generated<string>;
  success_percent: number | null;
  success_wait: number | null;
  error_percent: number | null;
  device_timeout: number;
  start_at: string | null;
  window: string | null;
  created: string;
  created_by: string | null;
  started: string | null;
  finished: string | null;
  updated: string;
  validation: string | null;
  retries: Generated<number>;
  retry_backoff: Generated<number>;
  validation_copy: string | null;
  recover: string | null;
}

/** `device_logs`, owned by src/update/logs. */
export interface DeviceLogsTable {
  id: Generated<number>;
  device_id: number;
  created: string;
  device_timestamp: string;
  name: string;
  entry: string;
  bytes: Generated<number>;
}

/** `device_tags`, owned by src/update/devices. */
export interface DeviceTagsTable {
  device_id: number;
  tag: string;
}

/** `devices`, owned by src/update/devices. */
export interface DevicesTable {
  id: Generated<number>;
  created: string;
  name: string;
  mac_address: string;
  public_key: string | null;
  key_fingerprint: string | null;
  capabilities: Generated<string>;
  metadata: Generated<string>;
  last_access: string | null;
}

/** `group_devices`, owned by src/update/groups. */
export interface GroupDevicesTable {
  group_id: number;
  device_id: number;
}

/** `group_packages`, owned by src/update/groups. */
export interface GroupPackagesTable {
  group_id: number;
  package_id: number;
}

/** `groups`, owned by src/update/groups. */
export interface GroupsTable {
  id: Generated<number>;
  created: string;
  metadata: string;
  policy: Generated<string>;
  priority: Generated<number>;
  created_by: string | null;
}

/** `lab_boards`, owned by src/lab. */
export interface LabBoardsTable {
  key: string;
  config: string;
  updated: string;
  actor: string;
}

/** `lab_console_spans`, owned by src/lab. */
export interface LabConsoleSpansTable {
  history_id: Generated<number>;
  device_id: number;
  start: number;
  end: number;
  bytes: Uint8Array;
  at: string;
  deployment_id: number | null;
  attempt: number | null;
}

/** `lab_open_spans`, owned by src/lab. */
export interface LabOpenSpansTable {
  device_id: Generated<number>;
  deployment_id: number;
  attempt: number;
  start: number | null;
  recovered: string | null;
}

/** `lab_power`, owned by src/lab. */
export interface LabPowerTable {
  device_id: Generated<number>;
  state: string;
  action: string;
  actor: string;
  at: string;
}

/** `lab_reservations`, owned by src/lab. */
export interface LabReservationsTable {
  device_id: Generated<number>;
  holder: string;
  note: string;
  since: string;
  until: string;
}

/** `packages`, owned by src/update/packages. */
export interface PackagesTable {
  id: Generated<number>;
  created: string;
  sha256: string;
  driver: string;
  metadata: string;
  storage_dir: string;
  storage_name: string;
  size: number;
  version: string;
  devtype: string;
  created_by: string | null;
  delta_target: number | null;
  delta_base_version: string | null;
}

/** `permissions`, owned by src/update/permissions. */
export interface PermissionsTable {
  id: Generated<number>;
  created: string;
  user_id: string;
  resource: string;
  resource_id: number | null;
  resource_name: string | null;
  permission: string;
}

/** `progress`, owned by src/update/progress. */
export interface ProgressTable {
  device_id: Generated<number>;
  mac_address: string;
  created: string;
  version: string;
  progress: Generated<number>;
  updated: string | null;
}

/** `registrations`, owned by src/update/registration. */
export interface RegistrationsTable {
  mac_address: string;
  key_fingerprint: string;
  public_key: string;
  metadata: string;
  last_appeared: string;
  client_address: Generated<string>;
  seq: Generated<number>;
}

/** `revoked_tokens`, owned by src/auth. */
export interface RevokedTokensTable {
  jti: string;
  revoked: string;
  expires: number | null;
}

/** `revoked_users`, owned by src/auth. */
export interface RevokedUsersTable {
  user_id: string;
  before_ms: number;
  revoked: string;
}

/** `schema_migrations`, owned by src/db. */
export interface SchemaMigrationsTable {
  version: Generated<number>;
  name: string;
  applied_at: string;
}

/** `settings`, owned by src/db. */
export interface SettingsTable {
  key: string;
  value: string;
}

/** `testrun_device_results`, owned by src/testrun/runs. */
export interface TestrunDeviceResultsTable {
  run_seq: number;
  run_id: string;
  config_name: string;
  device_mac: string;
  device_name: string;
  test_name: string;
  status: string;
}

/** `testrun_runs`, owned by src/testrun/runs. */
export interface TestrunRunsTable {
  seq: Generated<number>;
  id: string;
  trigger_id: string;
  config_name: string;
  test_suite_name: string;
  machine_target: string | null;
  overrides: string | null;
  pattern: Generated<string>;
  repeat_of: string | null;
  status: string;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  metadata: Generated<string>;
  error: string | null;
  warnings: Generated<string>;
  abort_requested: Generated<number>;
  plan: string;
  devices: string | null;
  passed: number | null;
  failed: number | null;
  skipped: number | null;
}

/** `testrun_triggers`, owned by src/testrun/runs. */
export interface TestrunTriggersTable {
  seq: Generated<number>;
  id: string;
  created_at: number;
  config_name: string;
  test_suite_name: string;
  orchestrated: Generated<number>;
  status: string;
  is_aborted: Generated<number>;
  error: string | null;
  nodes: Generated<string>;
  remote_runs: Generated<string>;
  finished_at: number | null;
  results_dir: string | null;
}

/** `update_history`, owned by src/update/deployments. */
export interface UpdateHistoryTable {
  id: Generated<number>;
  device_id: number;
  deployment_id: number | null;
  from_version: string | null;
  to_version: string;
  outcome: string;
  reason: string | null;
  at: string;
  report_id: string | null;
  attempt: number | null;
  output: string | null;
}

/** Every table, as the query layer (Kysely) is typed. */
export interface Tables {
  _labgate_meta: LabgateMetaTable;
  access_generation: AccessGenerationTable;
  accounts: AccountsTable;
  action_log: ActionLogTable;
  audit_log: AuditLogTable;
  cluster_devices: ClusterDevicesTable;
  cluster_nodes: ClusterNodesTable;
  ddi_actions: DdiActionsTable;
  ddi_artifacts: DdiArtifactsTable;
  ddi_targets: DdiTargetsTable;
  deployment_devices: DeploymentDevicesTable;
  deployments: DeploymentsTable;
  device_logs: DeviceLogsTable;
  device_tags: DeviceTagsTable;
  devices: DevicesTable;
  group_devices: GroupDevicesTable;
  group_packages: GroupPackagesTable;
  groups: GroupsTable;
  lab_boards: LabBoardsTable;
  lab_console_spans: LabConsoleSpansTable;
  lab_open_spans: LabOpenSpansTable;
  lab_power: LabPowerTable;
  lab_reservations: LabReservationsTable;
  packages: PackagesTable;
  permissions: PermissionsTable;
  progress: ProgressTable;
  registrations: RegistrationsTable;
  revoked_tokens: RevokedTokensTable;
  revoked_users: RevokedUsersTable;
  schema_migrations: SchemaMigrationsTable;
  settings: SettingsTable;
  testrun_device_results: TestrunDeviceResultsTable;
  testrun_runs: TestrunRunsTable;
  testrun_triggers: TestrunTriggersTable;
  update_history: UpdateHistoryTable;
}
