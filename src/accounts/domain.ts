import type { AppContext } from "../server/context.ts";
import { sessionAlive } from "./accounts.ts";
import { LoginThrottle } from "./throttle.ts";

/** The accounts' services, as the routers get them (src/server/routes.ts). */
export interface AccountsDomain {
  throttle: LoginThrottle;
}

/** The composition root of console accounts: installs the session gate, makes the login throttle. */
export function createAccountsDomain(ctx: AppContext): AccountsDomain {
  // Session tokens are good while their account is enabled and has not ended its sessions.
  ctx.sessionGate = (identity) => sessionAlive(ctx.db, identity);
  return { throttle: new LoginThrottle() };
}
