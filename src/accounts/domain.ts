import type { AppContext } from "../app/context.ts";
import type { ManagementIdentity } from "../auth/tokens.ts";
import { sessionAlive } from "./accounts.ts";
import { LoginThrottle } from "./throttle.ts";

/** The accounts' services, as the app and the routers get them (src/server/start.ts, routes.ts). */
export interface AccountsDomain {
  throttle: LoginThrottle;
  /** Session tokens are good while their account is enabled and has not ended its sessions. */
  sessionGate: (identity: ManagementIdentity) => boolean;
}

/** The composition root of console accounts: the session gate and the login throttle. */
export function createAccountsDomain(ctx: AppContext): AccountsDomain {
  return { throttle: new LoginThrottle(), sessionGate: (identity) => sessionAlive(ctx.db, identity) };
}
