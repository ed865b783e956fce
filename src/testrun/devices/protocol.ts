/*
 * Test runs on managed devices: the messages between the gateway and `labgate agent` over the
 * device management WebSocket (docs/device-tests.md), and the bounds both sides keep. The agent
 * uploads artifacts to its gateway: PUT `/api/v1/devices/test-runs/<run>/artifacts/<name>?offset=N`
 * with its device token. Imports only types: the agent and the gateway share it.
 */
import type { PlanEntry } from "../plan.ts";

/** Where a config entry (`machines:`) or a trigger (`machine_target`) names managed devices. */
export const DEVICE_TARGET = /^(device|group|tag):(.+)$/;
export const isDeviceTarget = (name: string): boolean => DEVICE_TARGET.test(name);

/** A row's text fields are cut to these many characters; more rows than MAX_ROWS fail the device's share. */
export const LIMITS = { testName: 1024, module: 1024, message: 64 * 1024, name: 1024, output: 8 * 1024, artifactsPerRow: 100, rows: 100_000 } as const;

/** Server -> device: run these entries (a device's share of one run). */
export interface TestRunStart {
  method: "test_run_start";
  run_id: string;
  /** The device's entries, numbered for it (`test_config<k>`). */
  entries: PlanEntry[];
  /** Script module files the entries use: module key -> YAML text (they travel with the plan). */
  modules: Record<string, string>;
  /** Metadata commands of the selection (run first, as on the gateway). */
  metadata: import("../plan.ts").MetadataCommand[];
  /** A pytest -k style pattern; "" for every case. */
  pattern: string;
  /** Bytes of artifacts the gateway takes from this device for this run. */
  artifacts_max_bytes: number;
}

/** Server -> device: stop the run (its processes get SIGTERM, then SIGKILL). */
export interface TestRunAbort {
  method: "test_run_abort";
  run_id: string;
  reason: string;
}

/** Device -> server: one report row, as the case ends. */
export interface TestRunRow {
  method: "test_run_row";
  run_id: string;
  /** Epoch milliseconds (the device's clock). */
  start_time: number;
  test_name: string;
  module: string;
  /** Seconds. */
  duration: number;
  message: string;
  status: "passed" | "failed" | "skipped";
  /** Artifact names (relative to the device's artifact directory). */
  artifacts: string[];
  /** The entry's `name:` in the config ("" without one). */
  name?: string;
  /** A failed case: the end of its program's output. */
  output?: string;
}

/** Device -> server: the share ended (after its artifacts were uploaded), or was refused. */
export interface TestRunEnd {
  method: "test_run_end";
  run_id: string;
  status: "finished" | "failed" | "aborted";
  error: string | null;
  warnings: string[];
}

/** The capability an agent reports when its `tests.enabled` is true. */
export const TESTS_CAPABILITY = "tests";
