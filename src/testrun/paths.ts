import { join } from "node:path";
import type { Config } from "../config/config.ts";

/**
 * Where the test-run server keeps its files. By default under the data
 * dir; `test_server.configs_dir`, `reports_dir` and `artifacts_dir` (absolute after loading)
 * point them at an existing protoplaster install's directories instead, the one sanctioned
 * exception to "nothing outside the data dir", chosen by the admin. Combined multi-node results
 * then go into the artifacts directory, where protoplaster's scripts look for them.
 * Run ids are server-made, never user input.
 */
export interface TestrunDirs {
  configs: string;
  reports: string;
  artifacts: string;
  results: string;
}

export function testrunDirs(config: Config): TestrunDirs {
  const base = join(config.data_dir, "testrun");
  const { configs_dir, reports_dir, artifacts_dir } = config.test_server;
  return {
    configs: configs_dir || join(base, "configs"),
    reports: reports_dir || join(base, "reports"),
    artifacts: artifacts_dir || join(base, "artifacts"),
    results: artifacts_dir || join(base, "results"),
  };
}

export const reportPath = (dirs: TestrunDirs, runId: string) => join(dirs.reports, `${runId}.csv`);
/** A report's row index (a run on devices: which device each row is of, engine/report.ts). */
export const reportIndexPath = (dirs: TestrunDirs, runId: string) => join(dirs.reports, `${runId}.rows`);
/** A report's details file: what its rows say beyond the CSV's columns (engine/report.ts). */
export const reportDetailsPath = (dirs: TestrunDirs, runId: string) => join(dirs.reports, `${runId}.details`);
export const artifactsDir = (dirs: TestrunDirs, runId: string) => join(dirs.artifacts, runId);
