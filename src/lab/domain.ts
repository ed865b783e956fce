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
import { ReservationService, reservationOf } from "./reservations.ts";
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
export function createLabDomain(ctx: AppContext, runAs: TestRunAs): LabDomain {
  const boards = new BoardMap(ctx.config.lab.boards, ctx.db);
  const power = new PowerService(ctx, boards, { runAs, clock: ctx.clock });
  const reservations = new ReservationService(ctx.db);
  const consoles = new ConsoleService(ctx, boards);
  const spans = new AttemptSpans(ctx, consoles);
  consoles.start();
  ctx.onShutdown.push(async () => {
    await spans.flush();
    consoles.close();
  });
  return { boards, power, reservations, consoles, spans };
}

/**
 * Deployments' attempts on boards keep their console span (src/lab/spans.ts), and `recover`
 * power-cycles a board silent after its install, as system:deployment.
 */
export function joinDeployments(ctx: AppContext, lab: LabDomain, deployments: Pick<DeploymentService, "onAttempt" | "onRecover" | "heldBy">): void {
  deployments.heldBy((deviceId, now) => reservationOf(ctx.db, deviceId, now) !== undefined);
  deployments.onAttempt((event) => {
    if (event.kind === "offered") lab.spans.offered(event.deploymentId, event.deviceId, event.attempt);
    else if (event.kind === "ended") lab.spans.ended(event.deploymentId, event.deviceId, event.attempt);
    else lab.spans.recovered(event.deploymentId, event.deviceId, event.attempt);
  });
  deployments.onRecover(async ({ deviceId, minutes }) => {
    const device = getDevice(ctx.db, deviceId);
    if (!device || !lab.power.hasPort(device)) return undefined;
    await lab.power.switch(systemActor("deployment", dateOf(ctx.clock)), deviceId, "cycle");
    return { reason: `no report within ${minutes} minutes of its install: power-cycled` };
  });
}
