/*
 * The device management WebSocket's messages. Every message is one
 * JSON object with a `method`; extra fields are ignored (docs/device-protocol.md).
 */
import type { Action } from "../actions/schema.ts";

/** Server -> device. */
export type ServerMessage =
  | { method: "alert"; alert: Record<string, unknown> }
  // labgate: a deployment was aborted while the device downloaded its target: stop, install nothing.
  | { method: "update_abort"; version: string }
  // labgate: the `update_outcome` of this id is on the server's disk; the device may forget it.
  | { method: "update_outcome_ack"; id: string }
  // labgate: the validation test run of the update the device installed failed (docs/device-tests.md): its rollback_command runs.
  | { method: "validation_failed"; deployment_id: number; version: string; run_id: string }
  | { method: "shell_attach"; mac_addr: string; uuid: string }
  | { method: "action_list_query" }
  | { method: "action_exec"; execution_id: string; action_id: string }
  | { method: "fs_file_probe"; id: string; file: string }
  | { method: "fs_file_download"; id: string; file: string; upload_urls: string[]; part_size: number };

/**
 * Device -> server, labgate's addition to `update_progress` and `update_version`: what became of
 * an offered update (docs/device-protocol.md, "Update reports"). The device keeps each report until it is
 * acknowledged (`update_outcome_ack`), across reconnects and restarts, and sends it again on
 * every connection; the server's handling is idempotent (a report that made its history row is
 * recognised by its id and changes nothing).
 *
 *   {"method": "update_outcome", "id": "<unique per report>", "state": "installing" | "installed" | "failed" | "aborted",
 *    "version": "<the version offered or installed>", "from_version": "<the version it ran>",
 *    "reason": "download failed: ... | checksum mismatch | install command exited with 3 | rolled back | ...",
 *    "output": "<the last 4 KiB of the install command's output>",
 *    "deployment": <the offer's>, "attempt": <the offer's>}    (absent when the offer named none)
 */
export interface UpdateOutcomeMessage {
  method: "update_outcome";
  id: string;
  state: "installing" | "installed" | "failed" | "aborted";
  version: string;
  from_version?: string;
  reason?: string;
  output?: string;
  /** The deployment and attempt the answered offer named (docs/update-server.md, "Retries"). */
  deployment?: number;
  attempt?: number;
}

/** The built-in action every agent offers. */
export const TRIGGER_UPDATE_CHECK = (prefix: string): string => `${prefix}.builtins.trigger_update_check`;

/**
 * Capabilities a request needs. The labgate agent reports the first key of each; the reference
 * client's keys are accepted too so that both kinds of device work.
 */
export const CAPABILITY_KEYS = {
  action: ["exec_cmds", "action"],
  filesystem: ["file_transfer", "filesystem"],
  shell: ["shell_connect", "shell"],
} as const;
export type CapabilityKind = keyof typeof CAPABILITY_KEYS;

export function hasCapability(capabilities: Record<string, unknown> | undefined, kind: CapabilityKind): boolean {
  return CAPABILITY_KEYS[kind].some((key) => capabilities?.[key] === true);
}

const isString = (v: unknown): v is string => typeof v === "string";

/**
 * An action list as a device reports it: the served field names (`action_id`, `action_name`) or
 * the short ones (`id`, `name`). Entries without an id are dropped; undefined if not a list.
 */
export function parseActionList(value: unknown): Action[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const out: Action[] = [];
  for (const item of value) {
    if (!item || typeof item !== "object") continue;
    const a = item as Record<string, unknown>;
    const id = isString(a.action_id) ? a.action_id : isString(a.id) ? a.id : undefined;
    if (!id) continue;
    const name = isString(a.action_name) ? a.action_name : isString(a.name) ? a.name : id;
    out.push({
      action_id: id,
      action_name: name,
      description: isString(a.description) ? a.description : "",
      command: Array.isArray(a.command) ? a.command.filter(isString) : [],
      timeout: typeof a.timeout === "number" && Number.isFinite(a.timeout) && a.timeout > 0 ? a.timeout : 0,
    });
  }
  return out;
}

/** Parses one text frame: an object with a string `method`, else undefined. */
export function parseMessage(text: string): Record<string, unknown> & { method: string } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) return undefined;
  const method = (value as { method?: unknown }).method;
  return typeof method === "string" ? (value as Record<string, unknown> & { method: string }) : undefined;
}

/** A WebSocket close reason: at most 123 bytes of UTF-8 (a longer one makes `close` throw). */
export function closeReason(text: string): string {
  let reason = text;
  while (Buffer.byteLength(reason) > 123) reason = reason.slice(0, -1);
  return reason;
}
