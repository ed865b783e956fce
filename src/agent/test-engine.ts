/*
 * The test-run engine as the agent uses it (./tests.ts). In a build it is a bundle of its own
 * (AGENT_TESTS_BUNDLE, loaded with the device's first test run), not part of the agent's: V8 keeps
 * a bundle's whole source as long as any of its functions lives, and the engine with its modules and
 * parsers is half of the agent's.
 */
export { executeRun } from "../testrun/runs/runner.ts";
export { SEED_COLUMNS } from "../testrun/engine/report.ts";
