/*
 * Validation of updates (docs/device-tests.md): a deployment may name a test config (and suite);
 * once a device of it reports `installed`, the gateway runs that config on the device, and the
 * deployment neither advances nor completes until the verdict. A run that does not finish cleanly
 * fails the device (reason `validation`, counted by the error threshold), its output naming the
 * run, and the device is told so its agent runs its `rollback_command`. A validation under way
 * when the server stops is not resumed: the device stays `installed`.
 */
import type { AppContext } from "../../app/context.ts";
import type { ChannelHub } from "../../update/channel/hub.ts";
import type { DeploymentService } from "../../update/deployments/service.ts";
import type { DeploymentValidation } from "../../update/deployments/schema.ts";
import { getDeployment } from "../../update/deployments/store.ts";
import { getDevice } from "../../update/devices/devices.ts";
import type { TestRunService } from "../runs/service.ts";

/** The reason a device failed its validation (its deployment state reads `failed: validation`). */
export const VALIDATION_REASON = "validation";

/** Where the console shows a run (the link in the failed device's output). */
export const runLink = (runId: string): string => `/#/runs/${runId}`;

export function validateDeployments(ctx: Pick<AppContext, "db" | "log">, deployments: DeploymentService, runs: TestRunService, hub: ChannelHub): void {
  deployments.validator = { check: (v) => runs.checkOnDevice(v.config, v.suite) };
  deployments.onInstalled(({ deploymentId, deviceId, version }) => {
    const row = getDeployment(ctx.db, deploymentId);
    if (!row?.validation) return;
    const validation = JSON.parse(row.validation) as DeploymentValidation;
    // The deployment waits for the verdict before it counts the device as a success.
    deployments.holdForValidation(deploymentId, deviceId);
    void validate(ctx, deployments, runs, hub, { deploymentId, deviceId, version, validation })
      .catch((error) => ctx.log.error(`deployment ${deploymentId}: validation of device ${deviceId}: ${(error as Error).message}`))
      .finally(() => deployments.validationDone(deploymentId, deviceId).catch((error) => ctx.log.warn(`deployment ${deploymentId}: ${(error as Error).message}`)));
  });
}

async function validate(
  ctx: Pick<AppContext, "db" | "log">,
  deployments: DeploymentService,
  runs: TestRunService,
  hub: ChannelHub,
  job: { deploymentId: number; deviceId: number; version: string; validation: DeploymentValidation },
): Promise<void> {
  const device = getDevice(ctx.db, job.deviceId);
  if (!device) return;
  const { config, suite } = job.validation;
  let run;
  try {
    run = await runs.runOnDevice(config, suite, { id: device.id, mac: device.mac_address, name: device.name || device.mac_address });
  } catch (error) {
    // The config changed since the deployment was made (deleted, broken): the update is not validated.
    await deployments.fail(job.deploymentId, job.deviceId, VALIDATION_REASON, `validation config ${config} cannot run: ${(error as Error).message}`);
    return;
  }
  const ended = await runs.finalRun(run.id);
  if (ended?.status === "finished") return;
  const why = `test run ${run.id} ${ended?.status ?? "vanished"}${ended?.error ? `: ${ended.error}` : ""}`;
  await deployments.fail(job.deploymentId, job.deviceId, VALIDATION_REASON, `${why}\n${runLink(run.id)}`);
  try {
    hub.get(device.mac_address)?.send({ method: "validation_failed", deployment_id: job.deploymentId, version: job.version, run_id: run.id });
  } catch {
    // Gone meanwhile: its rollback waits for a person.
  }
}
