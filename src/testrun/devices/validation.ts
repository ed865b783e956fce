/*
 * Validation of updates (docs/device-tests.md): a deployment may name a test config (and suite);
 * once a device of it reports `installed`, the gateway runs that config on the device, and the
 * deployment neither advances nor completes until the verdict. A run that does not finish cleanly
 * fails the device (reason `validation`, counted by the error threshold), its output naming the
 * run, and the device is told so its agent runs its `rollback_command`. A passed validation is
 * recorded (`validated`); one under way when the server stops runs again after the restart.
 * What runs is the config as it was when the deployment was made (its pinned copy): uploading
 * another config under that name changes nothing a deployment runs. Each run is audited
 * (`testrun.trigger`, naming the deployment).
 */
import type { AppContext } from "../../app/context.ts";
import { recordAudit, systemActor } from "../../audit/audit.ts";
import type { ChannelHub } from "../../update/channel/hub.ts";
import type { DeploymentService } from "../../update/deployments/service.ts";
import type { DeploymentValidation } from "../../update/deployments/schema.ts";
import { activeDeployments, pinValidation, unvalidatedMembers, validationCopy } from "../../update/deployments/store.ts";
import { getDevice } from "../../update/devices/devices.ts";
import { dateOf } from "../../util/time.ts";
import type { PinnedConfig } from "../plan.ts";
import type { TargetDevice } from "./targets.ts";

/** The reason a device failed its validation (its deployment state reads `failed: validation`). */
export const VALIDATION_REASON = "validation";

/** Where the console shows a run (the link in the failed device's output). */
export const runLink = (runId: string): string => `/#/runs/${runId}`;

interface ValidationJob {
  deploymentId: number;
  deviceId: number;
  version: string;
  validation: DeploymentValidation;
}

type Ctx = Pick<AppContext, "clock" | "log" | "onClosing" | "store">;

/** What validations need of the test runs (src/testrun/runs/service.ts's TestRunService). */
export interface ValidationRuns {
  /** A copy of the config as it is now, for runs later. */
  pinOnDevice(configName: string, suite: string): PinnedConfig;
  runOnDevice(pinned: PinnedConfig, device: TargetDevice, validates: number): Promise<{ id: string }>;
  /** Resolves when the run is final; its final record. */
  finalRun(id: string): Promise<{ status: string; error: string | null } | undefined>;
}

export async function validateDeployments(ctx: Ctx, deployments: DeploymentService, runs: ValidationRuns, hub: ChannelHub): Promise<void> {
  const closing = { now: false };
  ctx.onClosing.push(() => (closing.now = true));
  const pin = (v: DeploymentValidation) => JSON.stringify(runs.pinOnDevice(v.config, v.suite));
  deployments.validator = { pin };
  await pinEarlier(ctx, pin);
  const start = (job: ValidationJob) => {
    // The deployment waits for the verdict before it counts the device as a success (held already
    // when the device moved to `installed`; a validation a restart interrupted is held here).
    deployments.holdForValidation(job.deploymentId, job.deviceId);
    void validate(ctx, deployments, runs, hub, job, closing)
      .catch((error) => ctx.log.error(`deployment ${job.deploymentId}: validation of device ${job.deviceId}: ${(error as Error).message}`))
      .finally(() => deployments.validationDone(job.deploymentId, job.deviceId).catch((error) => ctx.log.warn(`deployment ${job.deploymentId}: ${(error as Error).message}`)));
  };
  deployments.onInstalled(({ deploymentId, deviceId, version, validation }) => {
    if (validation) start({ deploymentId, deviceId, version, validation: JSON.parse(validation) as DeploymentValidation });
  });
  // Validations the last stop interrupted (their runs ended "interrupted by server restart") run
  // again; held now, before the deployments' first tick could count those devices as successes.
  for (const m of await unvalidatedMembers(ctx.store.query)) {
    ctx.log.info(`deployment ${m.deployment_id}: validating device ${m.device_id} again (interrupted by a restart)`);
    start({ deploymentId: m.deployment_id, deviceId: m.device_id, version: m.version, validation: JSON.parse(m.validation) as DeploymentValidation });
  }
}

/**
 * Active deployments made before validation configs were pinned get their copy now, once: from
 * then on an upload changes nothing they run. One whose config no longer runs keeps none, and its
 * devices fail their validation.
 */
async function pinEarlier(ctx: Ctx, pin: (v: DeploymentValidation) => string): Promise<void> {
  for (const row of await activeDeployments(ctx.store.query)) {
    if (!row.validation || (await validationCopy(ctx.store.query, row.id)) !== null) continue;
    const validation = JSON.parse(row.validation) as DeploymentValidation;
    let copy: string;
    try {
      copy = pin(validation);
    } catch (error) {
      ctx.log.warn(`deployment ${row.id}: validation config ${validation.config} cannot be pinned: ${(error as Error).message}`);
      continue;
    }
    // Durable before any validation below reads it.
    await pinValidation(ctx.store.query, row.id, copy);
    ctx.log.info(`deployment ${row.id}: validation config ${validation.config} pinned as it is now`);
  }
}

async function validate(
  ctx: Ctx,
  deployments: DeploymentService,
  runs: ValidationRuns,
  hub: ChannelHub,
  job: ValidationJob,
  closing: { now: boolean },
): Promise<void> {
  const device = await getDevice(ctx.store.query, job.deviceId);
  if (!device) return;
  const { config, suite } = job.validation;
  const copy = await validationCopy(ctx.store.query, job.deploymentId);
  let run;
  try {
    if (copy === null) throw new Error("no copy of it was kept when the deployment was made");
    run = await runs.runOnDevice(JSON.parse(copy) as PinnedConfig, { id: device.id, mac: device.mac_address, name: device.name || device.mac_address }, job.deploymentId);
  } catch (error) {
    // No copy (one the start could not pin), or one this server can no longer run: the update is not validated.
    await deployments.fail(job.deploymentId, job.deviceId, VALIDATION_REASON, `validation config ${config} cannot run: ${(error as Error).message}`);
    return;
  }
  const audit = { config, suite, deployment: job.deploymentId, device: device.mac_address };
  // The verdict is awaited whatever becomes of the entry (a database that cannot write loses it as well).
  await recordAudit(ctx.store.query, systemActor("server", dateOf(ctx.clock)), "testrun.trigger", `run:${run.id}`, audit)
    .catch((error) => ctx.log.error(`deployment ${job.deploymentId}: audit of validation run ${run.id}: ${(error as Error).message}`));
  const ended = await runs.finalRun(run.id);
  if (ended?.status === "finished") return deployments.validated(job.deploymentId, job.deviceId);
  // Ended by the server's stop (its device sockets close first, so it may read "device
  // disconnected"): no verdict; it runs again after the start.
  if (closing.now) return;
  const why = `test run ${run.id} ${ended?.status ?? "vanished"}${ended?.error ? `: ${ended.error}` : ""}`;
  await deployments.fail(job.deploymentId, job.deviceId, VALIDATION_REASON, `${why}\n${runLink(run.id)}`);
  // Gone meanwhile: its rollback waits for a person.
  hub.sendAnywhere(device.mac_address, { method: "validation_failed", deployment_id: job.deploymentId, version: job.version, run_id: run.id });
}
