/**
 * The events of `GET /api/stream` (server-sent events: `event: <name>`, `data: <JSON>`), each
 * data shape once: the services publish them, the console imports the types.
 */
import * as z from "zod";
import { DEVICE_STATES, STATUSES } from "../deployments/schema.ts";

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
