/** A test run's states (test-run-server.md 6); imports nothing, so the console shares it. */
export const RUN_STATUSES = ["pending", "running", "finished", "failed", "aborted"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
/** The states a run never leaves. */
export const FINAL_STATUSES: ReadonlySet<string> = new Set<RunStatus>(["finished", "failed", "aborted"]);
export const isFinalStatus = (status: string): status is "finished" | "failed" | "aborted" => FINAL_STATUSES.has(status);

/** A device's share of a run on managed devices (src/testrun/devices/), as the run object shows it. */
export interface DeviceProgress {
  /** The device's name (the report's `device name`); its artifacts are under `<dir>/`. */
  name: string;
  mac: string;
  dir: string;
  /** waiting: for the device to connect; then running, and one of the final states. */
  status: "waiting" | RunStatus;
  passed: number;
  failed: number;
  skipped: number;
  /** Why the share failed or was aborted ("device disconnected", ...); null otherwise. */
  error: string | null;
}
