/*
 * Update outcomes that answer no current attempt of a deployment (docs/update-server.md,
 * "Retries"): what a device did under the group's policy, in an earlier attempt, or in a
 * deployment that ended meanwhile. History, not a deployment state, and bounded like device logs:
 * recorded only when the device owes it (it answers an offer still open, or reports a version
 * installed, once), at most OUTCOMES_PER_MINUTE a device, HISTORY_PER_DEVICE rows kept a device.
 * Anything else is dropped and counted.
 */
import type { AppContext } from "../../app/context.ts";
import { LogRate } from "../logs/logs.ts";
import { getProgress, type UpdateProgress } from "../progress/progress.ts";
import type { DeviceState, Outcome } from "./schema.ts";
import { addHistory, attemptAnswered, latestMembership, newestHistory, reportApplied, trimHistory, updateMember } from "./store.ts";
import { isoTime } from "../../util/time.ts";

/** Outcomes outside a current attempt a device may have recorded per minute (beyond: dropped, counted). */
export const OUTCOMES_PER_MINUTE = 30;
/** Update history rows kept per device (the oldest go). */
export const HISTORY_PER_DEVICE = 1000;
/** States of a device in a deployment that ended in which its install may still report (an abort cannot stop one). */
const ENDED_OPEN: ReadonlySet<DeviceState> = new Set(["installing", "aborted", "not_reached"]);

export class PastOutcomes {
  private readonly ctx: Pick<AppContext, "store" | "clock" | "log">;
  private readonly progress: UpdateProgress;
  private readonly active: (deploymentId: number) => boolean;
  private readonly rate: LogRate;
  /** Outcomes dropped since the start (outside their bounds). */
  dropped = 0;
  private droppedLogged = -Infinity;

  /** `active` says whether a deployment is still active (its outcomes are the service's). */
  constructor(ctx: Pick<AppContext, "store" | "clock" | "log">, progress: UpdateProgress, active: (deploymentId: number) => boolean) {
    this.ctx = ctx;
    this.progress = progress;
    this.active = active;
    this.rate = new LogRate(() => OUTCOMES_PER_MINUTE, () => ctx.clock.now());
  }

  /** An `installed` or `failed` outcome of `deviceId`: a history row, or dropped. Resolves once durable. */
  async record(deviceId: number, outcome: Outcome): Promise<void> {
    const at = isoTime(this.ctx.clock.now());
    // A device past its allowance has every outcome dropped, whatever it answers: a flood costs no transaction.
    if (this.rate.spent(deviceId)) return this.drop(deviceId, `more than ${OUTCOMES_PER_MINUTE} a minute`);
    // What the device owes is read in the transaction that records it: another report may end the same offer meanwhile.
    const decided = await this.ctx.store.transact(async (tx): Promise<{ dropped?: string; counted: boolean }> => {
      // A copy of a report whose attempt recorded it meanwhile (the caller's check came before that commit).
      if (outcome.reportId !== undefined && (await reportApplied(tx, deviceId, outcome.reportId))) return { counted: false };
      // A second install of one offer (the device checked again while its first report was recorded) tells nothing new.
      if (outcome.deployment !== undefined && outcome.attempt !== undefined && (await attemptAnswered(tx, deviceId, outcome.deployment, outcome.attempt, outcome.version))) {
        return { dropped: `attempt ${outcome.attempt} of deployment ${outcome.deployment} has its outcome already`, counted: false };
      }
      const row = await latestMembership(tx, deviceId, outcome.deployment);
      // Its deployment ended while it installed that deployment's version (an abort cannot stop an install).
      const ended =
        row && !this.active(row.deployment_id) && ENDED_OPEN.has(row.state) && (outcome.deployment === undefined ? row.to_version === outcome.version : outcome.attempt === row.attempt) ? row : undefined;
      // The group's policy offered this version (its progress record is open); a report naming a deployment answers no policy offer.
      const offered = (await getProgress(tx, deviceId))?.version === outcome.version;
      const open = ended !== undefined || (offered && outcome.deployment === undefined);
      if (!open && outcome.state !== "installed") return { dropped: "it answers no open offer", counted: false };
      // Only looked at here: the allowance is taken once committed, as a transaction that PostgreSQL runs again must not take it twice.
      if (this.rate.spent(deviceId)) return { dropped: `more than ${OUTCOMES_PER_MINUTE} a minute`, counted: false };
      // Installed, once: the newest row says so already (a report sent again, or a flood).
      const newest = await newestHistory(tx, deviceId);
      if (!open && newest && newest.to_version === outcome.version && newest.outcome === "installed") return { counted: true };
      // An earlier attempt of a deployment the report names is history of that deployment.
      const of = ended ?? (outcome.deployment !== undefined ? row : undefined);
      if (offered) await this.progress.endIn(tx, deviceId);
      await addHistory(tx, {
        device_id: deviceId,
        deployment_id: of?.deployment_id ?? null,
        attempt: of ? (outcome.attempt ?? of.attempt) : null,
        from_version: outcome.fromVersion,
        to_version: outcome.version,
        outcome: outcome.state,
        reason: outcome.reason,
        output: outcome.state === "failed" ? outcome.output : null,
        at,
        report_id: outcome.reportId,
      });
      await trimHistory(tx, deviceId, HISTORY_PER_DEVICE);
      if (ended && ended.state === "installing") {
        const done = outcome.state === "installed" ? "installed" : "failed";
        await updateMember(tx, ended.deployment_id, deviceId, { state: done, at, reason: outcome.reason, output: outcome.output });
      }
      return { counted: true };
    });
    if (decided.counted) this.rate.take(deviceId, 1);
    if (decided.dropped !== undefined) this.drop(deviceId, decided.dropped);
  }

  /** Counts an outcome dropped, and says so in the log at most once a minute. */
  private drop(deviceId: number, why: string): void {
    this.dropped += 1;
    const now = this.ctx.clock.now();
    if (now - this.droppedLogged < 60_000) return;
    this.droppedLogged = now;
    this.ctx.log.warn(`device ${deviceId}: update_outcome dropped (${why}); ${this.dropped} dropped so far`);
  }
}
