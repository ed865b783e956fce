import { join } from "node:path";

/** Where a run's files live under the data dir (test-run-server.md 1.6). Run ids are server-made, never user input. */
export const reportsDir = (dataDir: string) => join(dataDir, "testrun", "reports");
export const reportPath = (dataDir: string, runId: string) => join(dataDir, "testrun", "reports", `${runId}.csv`);
export const artifactsRoot = (dataDir: string) => join(dataDir, "testrun", "artifacts");
export const artifactsDir = (dataDir: string, runId: string) => join(dataDir, "testrun", "artifacts", runId);
/** Combined results of triggers with `aggregate_results` (11.6); not a run, so not under artifacts/. */
export const resultsRoot = (dataDir: string) => join(dataDir, "testrun", "results");
