/** A test run's states; imports nothing, so the console shares it. */
export const RUN_STATUSES = ["pending", "running", "finished", "failed", "aborted"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
/** The states a run never leaves. */
export const FINAL_STATUSES: ReadonlySet<string> = new Set<RunStatus>(["finished", "failed", "aborted"]);
export const isFinalStatus = (status: string): status is "finished" | "failed" | "aborted" => FINAL_STATUSES.has(status);
