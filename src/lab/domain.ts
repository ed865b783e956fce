/*
 * The composition root of the board lab: the board map of `lab.boards`, power control through
 * each board's driver, reservations (test runs check them where they resolve their devices), the
 * console captures. The routers get the built services (src/server/routes.ts) and only route.
 */
import type { AppContext } from "../app/context.ts";
import type { TestRunAs } from "../testrun/engine/identity.ts";
import { BoardMap } from "./boards.ts";
import { ConsoleService } from "./console.ts";
import { PowerService } from "./power.ts";
import { ReservationService } from "./reservations.ts";

export interface LabDomain {
  boards: BoardMap;
  power: PowerService;
  reservations: ReservationService;
  /** Every board's console port, read continuously into its ring on disk. */
  consoles: ConsoleService;
}

/** `runAs`: who power commands run as (the test user, as test processes). */
export function createLabDomain(ctx: AppContext, runAs: TestRunAs): LabDomain {
  const boards = new BoardMap(ctx.config.lab.boards, ctx.db);
  const power = new PowerService(ctx, boards, { runAs, clock: ctx.clock });
  const reservations = new ReservationService(ctx.db);
  const consoles = new ConsoleService(ctx, boards);
  consoles.start();
  ctx.onShutdown.push(() => consoles.close());
  return { boards, power, reservations, consoles };
}
