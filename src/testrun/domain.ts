/*
 * The composition root of the test-run server (test-run-server.md): builds the config store and
 * the run service, aborts what the last process left unfinished (6.7) and registers the shutdown
 * of the queue and of the orchestrations. The routers get the built services (src/server/routes.ts).
 */
import { Broadcaster } from "../http/sse.ts";
import type { AppContext } from "../app/context.ts";
import type { ChannelHub } from "../update/channel/hub.ts";
import { ConfigStore } from "./config/store.ts";
import { ConfigViewCache } from "./config/view-cache.ts";
import { testrunDirs } from "./runs/paths.ts";
import { TestRunService } from "./runs/service.ts";
import { RunStore, type RunChange } from "./runs/store.ts";

/** The test-run server's services, as the routers get them. */
export interface TestRunDomain {
  /** Uploaded configs; the run engine reads them too. */
  configs: ConfigStore;
  /** Parsed test-suite and override-hint views of the configs, kept while their files are unchanged. */
  views: ConfigViewCache;
  runs: TestRunService;
  /** Every change of a run or trigger record, once on disk (`GET /api/v1/test-runs/stream`). */
  changes: Broadcaster<RunChange>;
}

/** `hub`: the device sockets, for runs on managed devices (none: device targets are refused). */
export function createTestRunDomain(ctx: AppContext, hub?: ChannelHub): TestRunDomain {
  // Made at start: clears the temp files of uploads a stop interrupted.
  const configs = new ConfigStore(testrunDirs(ctx.config).configs, ctx.config.test_server.max_config_bytes);
  const changes = new Broadcaster<RunChange>();
  const runs = new TestRunService(ctx, configs, new RunStore(ctx.db, (change) => changes.emit(change)), hub);
  runs.recoverFromRestart();
  // Graceful shutdown: pending and running runs end `aborted` with `server shutdown`.
  ctx.onShutdown.push(() => runs.shutdown());
  return { configs, views: new ConfigViewCache(configs), runs, changes };
}
