/*
 * The device side of deployments on the device socket: `update_outcome` reports (parsed here,
 * acknowledged once durable; docs/device-protocol.md, "Update reports").
 */
import type { AppContext } from "../../app/context.ts";
import type { ChannelHub } from "../channel/hub.ts";
import { tail, type DeploymentService } from "./service.ts";
import type { Outcome } from "./schema.ts";

const STATES = new Set(["installing", "installed", "failed", "aborted"]);
const MAX_ID = 128;
const MAX_VERSION = 256;
const MAX_REASON = 1024;

const text = (value: unknown, max: number): string | null => (typeof value === "string" && value !== "" ? value.slice(0, max) : null);
const count = (value: unknown): number | undefined => (Number.isSafeInteger(value) && (value as number) > 0 ? (value as number) : undefined);

/** A well-formed `update_outcome` (id, state, version), or a message saying what is wrong. */
export function parseOutcome(message: Record<string, unknown>): { id: string; outcome: Outcome } | string {
  const id = message.id;
  if (typeof id !== "string" || id === "" || id.length > MAX_ID) return `update_outcome needs an "id" string of 1 to ${MAX_ID} characters`;
  if (typeof message.state !== "string" || !STATES.has(message.state)) return `update_outcome "state" must be one of ${[...STATES].join(", ")}`;
  if (typeof message.version !== "string" || message.version === "" || message.version.length > MAX_VERSION) return `update_outcome needs a "version" string`;
  return {
    id,
    outcome: {
      reportId: id,
      deployment: count(message.deployment),
      attempt: count(message.attempt),
      state: message.state as Outcome["state"],
      version: message.version,
      fromVersion: text(message.from_version, MAX_VERSION),
      reason: text(message.reason, MAX_REASON),
      output: typeof message.output === "string" ? tail(message.output) : null,
    },
  };
}

/** Installs the `update_outcome` handler: durable first, then the acknowledgement. */
export function handleOutcomes(ctx: AppContext, hub: ChannelHub, deployments: DeploymentService): void {
  hub.handle("update_outcome", async (conn, message) => {
    const parsed = parseOutcome(message);
    if (typeof parsed === "string") return ctx.log.warn(`device ${conn.mac}: ${parsed}; ignored`);
    await deployments.outcome(conn, parsed.outcome);
    if (conn.open) conn.send({ method: "update_outcome_ack", id: parsed.id });
  });
}
