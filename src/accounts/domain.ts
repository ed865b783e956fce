import type { AppContext } from "../app/context.ts";
import type { AccountGate } from "../auth/authority.ts";
import { accountStanding } from "./accounts.ts";
import { LoginThrottle } from "./throttle.ts";

/** The accounts' services, as the app and the routers get them (src/server/start.ts, routes.ts). */
export interface AccountsDomain {
  throttle: LoginThrottle;
  /** Tokens act as their account stands now: its current scopes, refused once disabled, deleted or its sessions ended. */
  accountGate: AccountGate;
}

/** The composition root of console accounts: the account gate and the login throttle. */
export function createAccountsDomain(ctx: AppContext): AccountsDomain {
  return { throttle: new LoginThrottle(), accountGate: (identity) => accountStanding(ctx.store.query, identity) };
}
