import { PlanError, type ConfigSource, type PlanRequest, type TestPlan } from "../plan.ts";

/**
 * Loads `request.configName` from `source` (includes, anchors, in-file and request overrides),
 * selects the suite or group, filters by machine target and numbers the entries (sections 2-5).
 * Throws PlanError: 404 config missing / unknown suite, 400 bad overrides or name, 422 invalid config.
 */
export function buildPlan(source: ConfigSource, request: PlanRequest): TestPlan {
  void source;
  throw new PlanError("invalid_config", `not implemented yet: ${request.configName}`);
}
