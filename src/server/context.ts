import type { Config } from "../config/config.ts";
import type { Database } from "../db/index.ts";
import type { DeviceIdentity, ManagementIdentity, TokenService } from "../auth/tokens.ts";
import type { Logger } from "../util/log.ts";
import type { Clock } from "../util/time.ts";

/** Everything a domain needs from the running appliance; built once by the server and passed down. */
export interface AppContext {
  config: Config;
  dataDir: string;
  db: Database;
  tokens: TokenService;
  log: Logger;
  version: string;
  /** The time, for every domain (tests move it). */
  clock: Clock;
  startedAt: Date;
  /**
   * Called for every request made with a valid device token; false refuses the token (e.g. the
   * device was deleted). The update server installs it; absent means every valid token passes.
   */
  deviceGate?: (identity: DeviceIdentity) => boolean;
  /**
   * A management token as its account stands now (src/auth/authority.ts asks it once per access
   * generation): the identity with the account's current scopes, or why it is refused (the
   * session ended, the account is disabled). The accounts domain installs it.
   */
  accountGate?: (identity: ManagementIdentity) => ManagementIdentity | string;
  /**
   * Called when the server stops accepting, before it waits for open connections: end
   * long-lived ones (device WebSockets, event streams) so that shutdown does not wait on them.
   */
  onClosing: Array<() => void>;
  /** Work to finish before the process exits (closing sockets, stopping runs). */
  onShutdown: Array<() => Promise<void> | void>;
}

export type Identity = ManagementIdentity | DeviceIdentity;

/** Hono environment shared by every route: the authenticated caller, when there is one. */
export interface AppEnv {
  Variables: {
    identity: Identity;
    /** Echoed as `X-Request-Id` and carried by the request's log lines. */
    requestId: string;
  };
}
