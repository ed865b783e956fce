/**
 * The lab API's shapes, each once: lab/routes.ts registers them with the routes (the OpenAPI
 * document shows them), the console imports the types.
 */
import * as z from "zod";
import { integerParam, strictBody } from "../util/shapes.ts";

export const PowerState = z
  .object({
    device_id: z.int(),
    driver: z.string().nullable().describe("the board's power driver (lab.boards); null: the device has no power port"),
    state: z.enum(["on", "off", "unknown"]).describe("what the last successful action left the port in; unknown before the first"),
    last_action: z
      .object({ action: z.enum(["on", "off", "cycle"]), by: z.string().describe("the account or token user"), at: z.string().describe("ISO 8601") })
      .nullable(),
    busy: z.boolean().describe("an action on this board is under way"),
    may_switch: z.boolean().describe("the caller holds power on the device (or svc_admin_rw)"),
    console: z.boolean().describe("the board has a console port (GET /api/v2/devices/{id}/console)"),
    console_write: z.boolean().describe("the caller may write to it (shell on the device; GET /api/v2/devices/{id}/console/ws)"),
  })
  .meta({ id: "PowerState" });
export type PowerState = z.infer<typeof PowerState>;

const MINUTES = "schema validation failed: field \"minutes\" must be an integer from 1 to 10080 (a week)";
const NOTE = "schema validation failed: field \"note\" must be a string of at most 256 characters";
/** The body of POST /api/v2/devices/{id}/reservation: how long from now, and why. */
export const ReservationCreate = strictBody({
  minutes: z.int({ error: MINUTES }).min(1, { error: MINUTES }).max(10080, { error: MINUTES }),
  note: z.string({ error: NOTE }).max(256, { error: NOTE }).default(""),
});

export const ReservationState = z
  .object({
    device_id: z.int(),
    reserved: z.boolean(),
    holder: z.string().nullable().describe("the account or token user who holds it"),
    note: z.string().nullable(),
    since: z.string().nullable().describe("ISO 8601"),
    until: z.string().nullable().describe("ISO 8601; past it the device is free"),
  })
  .meta({ id: "Reservation" });
export type ReservationState = z.infer<typeof ReservationState>;

/** The query of GET /api/v2/devices/{id}/console. */
export const ConsoleQuery = z.object({
  since: integerParam("since", 0, Number.MAX_SAFE_INTEGER).describe("a byte offset (X-Console-End of an earlier answer); absent: all that is kept"),
});

/** A deployment attempt's console span, as GET /api/v2/devices/{id}/console-spans lists it. */
export const ConsoleSpan = z
  .object({
    history_id: z.int().describe("the attempt's row of GET /api/v2/devices/{id}/update-history"),
    start: z.int().describe("console offset of its first byte"),
    end: z.int().describe("console offset after its last byte"),
    bytes: z.int(),
    at: z.string().describe("ISO 8601: when it was saved"),
  })
  .meta({ id: "ConsoleSpan" });
export type ConsoleSpan = z.infer<typeof ConsoleSpan>;

/** A console span on a deployment's page: the device and attempt it belongs to. */
export const DeploymentConsoleSpan = z
  .object({
    device_id: z.int(),
    attempt: z.int().describe("the device's attempt in the deployment"),
    history_id: z.int().describe("the row of GET /api/v2/devices/{id}/update-history the span is beside (its text: .../update-history/{entry}/console)"),
    bytes: z.int(),
    at: z.string().describe("ISO 8601: when it was saved"),
  })
  .meta({ id: "DeploymentConsoleSpan" });

/** A board as GET /api/v2/lab/boards lists it: its keys as in lab.boards, and where it was set. */
export const BoardView = z
  .object({
    device: z.string(),
    power: z.record(z.string(), z.unknown()).optional().describe("the power port: driver and its keys (docs/lab.md)"),
    serial: z.record(z.string(), z.unknown()).optional().describe("the console port: {port, baud} or {tcp}"),
    source: z.enum(["config", "api"]).describe("config: lab.boards of the config file (not changed through the API); api: set by an administrator"),
  })
  .meta({ id: "Board" });
