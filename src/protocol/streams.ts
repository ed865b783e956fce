/*
 * The server-sent event streams the console follows, each event's data once: the routes send them,
 * the console imports the types. `GET /api/stream` (devices, deployments): src/update/events/schema.ts.
 */
import * as z from "zod";
import { TestRun, Trigger } from "../testrun/schema.ts";

/** `GET /api/v1/test-runs/stream`: each run's and trigger's changes, as the reader may see them. */
export const RunStreamEvents = {
  /** A run changed (status, counts, devices): the run object. */
  run: TestRun,
  /** A trigger changed: the trigger object. */
  trigger: Trigger,
  /** A run was deleted. */
  "run-deleted": z.object({ id: z.string().describe("the run's id") }),
};
export type RunStreamEventName = keyof typeof RunStreamEvents;
/** The data of each event, by name. */
export type RunStreamEventData = { [N in RunStreamEventName]: z.infer<(typeof RunStreamEvents)[N]> };
