/*
 * The device side of deployments on the device socket: `update_outcome` reports (their schema:
 * src/protocol/labgate/device.ts), acknowledged once durable (docs/device-protocol.md, "Update reports").
 */
import type { ChannelHub } from "../channel/hub.ts";
import { tail, type DeploymentService } from "./service.ts";
import type { Outcome } from "./schema.ts";
import { OUTCOME_LIMITS, type UpdateOutcome } from "../../protocol/labgate/device.ts";

const cut = (value: string | undefined, max: number): string | null => (value ? value.slice(0, max) : null);

/** A report as the deployments take it (the schema checked its fields; longer texts are cut). */
export function outcomeOf(message: UpdateOutcome): Outcome {
  return {
    reportId: message.id,
    deployment: message.deployment,
    attempt: message.attempt,
    state: message.state,
    version: message.version,
    fromVersion: cut(message.from_version, OUTCOME_LIMITS.version),
    reason: cut(message.reason, OUTCOME_LIMITS.reason),
    output: message.output === undefined ? null : tail(message.output),
  };
}

/** Installs the `update_outcome` handler: durable first, then the acknowledgement. */
export function handleOutcomes(hub: ChannelHub, deployments: DeploymentService): void {
  hub.handle("update_outcome", async (conn, message) => {
    await deployments.outcome(conn, outcomeOf(message));
    if (conn.open) conn.send({ method: "update_outcome_ack", id: message.id });
  });
}
