import type { Identity } from "../../app/context.ts";
import { sql, type SqlBool } from "kysely";
import type { Store } from "../../db/store.ts";
import { LabgateError } from "../../util/errors.ts";
import { rfc822 } from "../../util/time.ts";
import { listDevices } from "../devices/devices.ts";
import { memberFilter } from "../groups/groups.ts";
import { permissionFilter } from "../permissions/permissions.ts";
import { sumOf, SUCCEEDED, totalOf } from "./model.ts";
import { DEVICE_STATES, type Counts, type Deployment, type DeploymentValidation } from "./schema.ts";
import type { DeploymentService } from "./service.ts";
import { parsePhases, parsePhaseStarted, parseWindow, type DeploymentRow } from "./store.ts";

const time = (iso: string | null) => (iso === null ? null : rfc822(new Date(iso)));

/** A deployment as the API shows it, with its counts per state and per phase. */
export async function deploymentView(service: DeploymentService, row: DeploymentRow): Promise<Deployment> {
  const counts = await service.counts(row);
  const ends = parsePhases(row);
  const started = parsePhaseStarted(row);
  const all = counts.reduce<Counts>((sum, c) => {
    for (const state of DEVICE_STATES) sum[state] += c[state];
    return sum;
  }, Object.fromEntries(DEVICE_STATES.map((s) => [s, 0])) as Counts);
  return {
    id: row.id,
    group: row.group_id,
    version: row.version,
    status: row.status,
    pause_reason: row.pause_reason,
    current_phase: row.current_phase,
    gate: service.gateOf(row),
    window_open: service.windowOpenNow(row),
    devices: totalOf(all),
    counts: all,
    phases: ends.map((end, i) => ({
      index: i,
      until: end,
      devices: totalOf(counts[i]),
      started: started[i] ? rfc822(new Date(started[i])) : null,
      succeeded: sumOf(counts[i], SUCCEEDED),
      counts: counts[i],
    })),
    success_percent: row.success_percent,
    success_wait_minutes: row.success_wait,
    error_percent: row.error_percent,
    device_timeout_minutes: row.device_timeout,
    retries: row.retries,
    retry_backoff_seconds: row.retry_backoff,
    start_at: time(row.start_at),
    window: parseWindow(row),
    created: rfc822(new Date(row.created)),
    created_by: row.created_by,
    validation: row.validation ? (JSON.parse(row.validation) as DeploymentValidation) : null,
    recover: row.recover ? (JSON.parse(row.recover) as { power_cycle_after_minutes: number }) : null,
    started: time(row.started),
    finished: time(row.finished),
  };
}

/**
 * A deployment's `validation` runs tests on the group's devices: the caller needs svc_tests_rw
 * and the `test` permission on each of them (403 naming those it lacks, found in one query); the
 * service then pins the config, which must run on a device here (src/testrun/devices/validation.ts).
 */
export async function checkValidation(store: Store, identity: Identity, groupId: number, service: DeploymentService): Promise<void> {
  if (!service.validator) throw new LabgateError("invalid", `field "validation": this server runs no tests`);
  if (identity.kind !== "mgmt" || !(identity.scopes.has("tests_rw") || identity.scopes.has("admin_rw"))) throw new LabgateError("forbidden", `field "validation": needs svc_tests_rw`);
  const testable = permissionFilter(identity, "device", "d", "test");
  if (!testable) return;
  const refused = (await listDevices(store, sql<SqlBool>`(${memberFilter(groupId)}) AND NOT (${testable})`)).map((d) => `'${d.name || d.mac_address}'`);
  if (refused.length > 0) throw new LabgateError("forbidden", `field "validation": no test permission on device${refused.length > 1 ? "s" : ""} ${refused.join(", ")}`);
}
