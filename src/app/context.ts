import type { Cluster } from "../cluster/cluster.ts";
import type { Config } from "../config/config.ts";
import type { Store } from "../db/store.ts";
import type { ObjectStore } from "../storage/objects.ts";
import type { DeviceIdentity, ManagementIdentity, TokenService } from "../auth/tokens.ts";
import type { Logger } from "../util/log.ts";
import type { Clock } from "../util/time.ts";

/**
 * What every part of the running appliance shares: its config, data dir, database, tokens, log and
 * clock, and where to register shutdown work. Built once by the server (src/server/start.ts) and
 * passed down; read-only for the domains, which keep their own state in the objects their
 * composition roots build (update/domain.ts, testrun/domain.ts, accounts/domain.ts).
 */
export interface AppContext {
  readonly config: Config;
  readonly dataDir: string;
  /** The data layer over the configured engine (src/db/store.ts): every query, and what is engine-specific (health, backups). */
  readonly store: Store;
  /** Package objects, test-run reports and artifacts when they are shared (`storage.driver`, src/storage/objects.ts). */
  readonly objects: ObjectStore;
  readonly tokens: TokenService;
  readonly log: Logger;
  readonly version: string;
  /** The time, for every domain (tests move it). */
  readonly clock: Clock;
  readonly startedAt: Date;
  /** The other nodes on the same PostgreSQL, and which jobs this one runs (one node, running them all, on the embedded database). */
  readonly cluster: Cluster;
  /**
   * Called when the server stops accepting, before it waits for open connections: end
   * long-lived ones (device WebSockets, event streams) so that shutdown does not wait on them.
   */
  readonly onClosing: Array<() => void>;
  /** Work to finish before the process exits (closing sockets, stopping runs). */
  readonly onShutdown: Array<() => Promise<void> | void>;
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
