/*
 * The composition root of the board lab: the board map of `lab.boards`, power control through
 * each board's driver, reservations (test runs check them where they resolve their devices), the
 * console captures. The routers get the built services (src/server/routes.ts) and only route.
 */
import type { AppContext } from "../app/context.ts";
import type { TestRunAs } from "../testrun/engine/identity.ts";
import type { DeploymentService } from "../update/deployments/service.ts";
import { systemActor } from "../audit/audit.ts";
import { getDevice } from "../update/devices/devices.ts";
import { dateOf } from "../util/time.ts";
import { BoardMap } from "./boards.ts";
import { ConsoleService } from "./console.ts";
import { PowerService } from "./power.ts";
import { ReservationService } from "./reservations.ts";
import { AttemptSpans } from "./spans.ts";

export interface LabDomain {
  boards: BoardMap;
  power: PowerService;
  reservations: ReservationService;
  /** Every board's console port, read continuously into its ring on disk. */
  consoles: ConsoleService;
  /** The console span of each deployment attempt on a board (joinDeployments). */
  spans: AttemptSpans;
}

/** `runAs`: who power commands run as (the test user, as test processes). */
export async function createLabDomain(ctx: AppContext, runAs: TestRunAs): Promise<LabDomain> {
  const boards = new BoardMap(ctx.config.lab.boards, ctx.store);
  await boards.load();
  const power = new PowerService(ctx, boards, { runAs, clock: ctx.clock });
  const reservations = new ReservationService(ctx);
  await reservations.load();
  const consoles = new ConsoleService(ctx, boards);
  const spans = new AttemptSpans(ctx, boards, consoles);
  consoles.start();
  ctx.onShutdown.push(async () => {
    await spans.flush();
    consoles.close();
  });
  return { boards, power, reservations, consoles, spans };
}

/**
 * Deployments' attempts on boards keep their console span (src/lab/spans.ts), and `recover`
 * power-cycles a board silent after its install, once per attempt, as system:deployment.
 */
export function joinDeployments(ctx: AppContext, lab: LabDomain, deployments: Pick<DeploymentService, "onAttempt" | "onRecover" | "heldBy">): void {
  deployments.heldBy((deviceId, now) => lab.reservations.holds(deviceId, now));
  deployments.onAttempt((event) => {
    const { deploymentId, deviceId, attempt } = event;
    const done = event.kind === "offered" ? lab.spans.offered(deploymentId, deviceId, attempt) : event.kind === "ended" ? lab.spans.ended(deploymentId, deviceId, attempt) : lab.spans.recovered(deploymentId, deviceId, attempt);
    done.catch((error: Error) => ctx.log.warn(`lab: console span of device ${deviceId} (${event.kind}): ${error.message}`));
  });
  deployments.onRecover(async ({ deploymentId, deviceId, attempt, minutes }) => {
    const device = await getDevice(ctx.store.query, deviceId);
    if (!device || !lab.power.hasPort(device)) return undefined;
    const actor = systemActor("deployment", dateOf(ctx.clock));
    // Marked on disk first: a restart during the cycle does not cycle the board again for this attempt.
    if (!(await lab.spans.markRecovered(deploymentId, deviceId, attempt, actor.at))) return undefined;
    await lab.power.switch(actor, deviceId, "cycle");
    return { reason: `no report within ${minutes} minutes of its install: power-cycled` };
  });
}
