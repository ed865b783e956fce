import type { AppContext } from "../server/context.ts";
import { accountStanding } from "./accounts.ts";
import { LoginThrottle } from "./throttle.ts";

/** The accounts' services, as the routers get them (src/server/routes.ts). */
export interface AccountsDomain {
  throttle: LoginThrottle;
}

/** The composition root of console accounts: installs the account gate, makes the login throttle. */
export function createAccountsDomain(ctx: AppContext): AccountsDomain {
  // Tokens act as their account stands now (scopes, enabled, sessions not ended).
  ctx.accountGate = (identity) => accountStanding(ctx.db, identity);
  return { throttle: new LoginThrottle() };
}
