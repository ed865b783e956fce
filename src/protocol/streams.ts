/*
 * The server-sent event streams the console follows (`event: <name>`, `data: <JSON>`), each
 * event's data once: the services publish them, the routes send them, the console imports the types.
 */
import * as z from "zod";
import { TestRun, Trigger } from "../testrun/schema.ts";
import { DEVICE_STATES, STATUSES } from "../update/deployments/schema.ts";

/** `GET /api/stream`: the devices' and the deployments' changes, as the reader may see them. */
export const StreamEvents = {
  /** A device opened its management socket. */
  connect: z.object({ device: z.string().describe("MAC address") }),
  /** A device's management socket closed. */
  disconnect: z.object({ device: z.string() }),
  /** A device reported update progress. */
  update: z.object({ device: z.string(), progress: z.int(), version: z.string().nullable().describe("the version being installed, null when not known") }),
  /** A device reported the version it runs now (stored already). */
  version: z.object({ device: z.string(), version: z.string() }),
  /** A deployment changed status or phase. */
  deployment: z.object({ deployment: z.int(), group: z.int(), status: z.enum(STATUSES), current_phase: z.int(), pause_reason: z.string().nullable() }),
  /** A device of a deployment changed state (with progress, reason, versions where they apply). */
  deployment_device: z.looseObject({ deployment: z.int(), group: z.int(), device: z.string(), phase: z.int(), state: z.enum(DEVICE_STATES) }),
};
export type StreamEventName = keyof typeof StreamEvents;
/** The data of each event, by name. */
export type StreamEventData = { [N in StreamEventName]: z.infer<(typeof StreamEvents)[N]> };

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
