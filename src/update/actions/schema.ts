/**
 * The remote actions API's shapes, each once: actions/routes.ts registers them with the routes
 * (the OpenAPI document shows them), the handlers parse and answer with them, the console imports the types.
 */
import * as z from "zod";
import { strictBody, zRequiredString } from "../../util/shapes.ts";

/** An action a device offers (`action/list`; docs/device-protocol.md, "Actions"). */
export const Action = z
  .object({
    action_id: z.string(),
    action_name: z.string(),
    description: z.string(),
    command: z.array(z.string()),
    timeout: z.number().describe("seconds; 0: none"),
  })
  .meta({ id: "Action" });
export type Action = z.infer<typeof Action>;

/** An entry of a device's action log, newest first. */
export const ActionLogEntry = z
  .object({
    id: z.string().describe("the execution id"),
    action: z.string().describe("the action id"),
    created: z.string().describe("ISO 8601 without zone (UTC)"),
    status: z.string().describe("pending, sent, success or error; with compat.action_log_status: exit_code a finished action's exit code as text"),
    status_code: z.int().nullable(),
    output: z.string().nullable().describe("base64 of the combined output once the result is in (\"\" for none), else null; at most 64 KiB"),
    output_truncated: z.boolean().describe("the whole output is behind download_url"),
    download_url: z.string().nullable().describe("a signed link to the whole output"),
  })
  .meta({ id: "ActionLogEntry" });
export type ActionLogEntry = z.infer<typeof ActionLogEntry>;

/** What the device answered to an execution. */
export const ExecResult = z.object({ status_code: z.int(), output: z.string().describe("base64 of the combined output") }).meta({ id: "ExecResult" });
export type ExecResult = z.infer<typeof ExecResult>;

const MAX_IDS = 10_000;
const MSG_IDS = `schema validation failed: field "actions" must be a list of at most ${MAX_IDS} log entry ids`;
/** The body of action/remove: log entries to remove. */
export const RemoveActions = strictBody({ actions: z.array(z.string({ error: MSG_IDS }), { error: MSG_IDS }).max(MAX_IDS, { error: MSG_IDS }) });

/** Devices of one fan-out: a cluster's whole fleet in one request, whose MACs still fit a JSON body (1 MiB). */
const MAX_DEVICES = 50_000;
const MSG_DEVICES = `schema validation failed: field "devices" must be a list of 1 to ${MAX_DEVICES} MAC addresses`;
/** The body of the fan-out (labgate's own route): one action on many devices. */
export const ExecMany = strictBody({
  action_id: zRequiredString("action_id", 256),
  devices: z.array(z.string({ error: MSG_DEVICES }), { error: MSG_DEVICES }).min(1, { error: MSG_DEVICES }).max(MAX_DEVICES, { error: MSG_DEVICES }),
});

/** One device's part of a fan-out: the status and body its own `action/exec` request would have answered. */
export const FanOutEntry = z.object({
  device: z.string(),
  status: z.int(),
  status_code: z.int().optional(),
  output: z.string().optional(),
  error: z.string().optional(),
});
export type FanOutEntry = z.infer<typeof FanOutEntry>;

/** The fan-out's answer: one entry per device, in the order given (duplicates once). */
export const FanOutResults = z.object({ results: z.array(FanOutEntry) });

/** POST /api/v1/cluster/actions: executions logged on another node, for the devices whose sockets are on this one. */
export const PeerExecutions = strictBody({
  action_id: z.string().min(1).max(256),
  executions: z.array(z.object({ mac: z.string().max(64), id: z.string().max(64) })).max(100_000),
});
export type PeerExecutions = z.infer<typeof PeerExecutions>;

/** GET /api/v1/cluster/devices/{mac}/actions: the list of a device whose socket is on the node asked. */
export const PeerActionList = z.object({ actions: z.array(Action) });

/** Each execution's outcome, in order: the device's result, queued (its socket went), or the error its own exec would answer. */
export const PeerOutcomes = z.object({
  outcomes: z.array(z.union([z.object({ result: ExecResult }), z.object({ queued: z.literal(true) }), z.object({ error: z.object({ code: z.string(), message: z.string() }) })])),
});
export type PeerOutcomes = z.infer<typeof PeerOutcomes>;
