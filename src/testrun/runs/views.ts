/*
 * How runs and triggers are answered: the records of store.ts
 * as the API's JSON objects.
 */
import { rfc822 } from "../../util/time.ts";
import type { DeviceProgress, TestRun, TestRunB, Trigger } from "../schema.ts";
import { FINAL_STATUSES, type RunRecord, type TriggerRecord, type TriggerStatus } from "./store.ts";

const date = (ms: number | null) => (ms === null ? "" : rfc822(new Date(ms), "+0000"));

/** The Variant A run object. */
export function runObjectA(r: RunRecord): TestRun {
  return {
    id: r.id,
    config_name: r.configName,
    test_suite_name: r.suite,
    created_at: date(r.createdAt),
    started_at: date(r.startedAt),
    finished_at: date(r.finishedAt),
    status: r.status,
    metadata: r.status === "pending" || r.status === "running" ? {} : r.metadata,
    trigger_id: r.triggerId,
    machine_target: r.machineTarget,
    overrides: r.overrides ?? [],
    pattern: r.pattern,
    ...(r.repeatOf ? { repeat_of: r.repeatOf } : {}),
    warnings: r.warnings,
    ...(r.abortRequested ? { abort_requested: true } : {}),
    ...(r.error ? { error: r.error } : {}),
    // A run on managed devices: each device's share, failures first (docs/device-tests.md).
    ...(r.devices ? { devices: devicesFailuresFirst(r.devices) } : {}),
    ...(r.counts ? { counts: r.counts } : {}),
  };
}

const unfinished = (d: DeviceProgress) => (d.status === "failed" || d.failed > 0 ? 0 : d.status === "finished" ? 2 : 1);

/** Devices with failures first, then those still going, then the rest; by name within each. */
export function devicesFailuresFirst(devices: DeviceProgress[]): DeviceProgress[] {
  return [...devices].sort((a, b) => unfinished(a) - unfinished(b) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The Variant B run object: integer id, `created`, `completed` once final. */
export function runObjectB(r: RunRecord): TestRunB {
  return {
    run_id: r.seq,
    id: r.seq,
    config_name: r.configName,
    test_suite_name: r.suite,
    created: date(r.createdAt),
    ...(FINAL_STATUSES.has(r.status) ? { completed: date(r.finishedAt ?? r.createdAt) } : {}),
    status: r.status,
    metadata: r.status === "pending" || r.status === "running" ? {} : r.metadata,
    ...(r.error ? { error: r.error } : {}),
  };
}

/** The trigger object: its status (TestRunService.triggerStatus), its runs and where its dispatch went. */
export function triggerObject(t: TriggerRecord, status: TriggerStatus, runs: RunRecord[]): Trigger {
  return {
    trigger_id: t.id,
    is_aborted: t.isAborted,
    status,
    error: t.error ?? "",
    config_name: t.configName,
    test_suite_name: t.suite,
    runs: runs.map(runObjectA),
    remote_runs: t.remoteRuns.map((r) => ({ machine: r.machine, group: r.group, run_id: r.runId })),
  };
}
