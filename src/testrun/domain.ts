/*
 * The composition root of the test-run server: builds the config store and
 * the run service, aborts what the last process left unfinished and registers the shutdown
 * of the queue and of the orchestrations. The routers get the built services (src/server/routes.ts).
 */
import { Broadcaster } from "../util/broadcaster.ts";
import type { AppContext } from "../app/context.ts";
import type { ChannelHub } from "../update/channel/hub.ts";
import { ConfigStore } from "./config/store.ts";
import { ConfigViewCache } from "./config/view-cache.ts";
import { testrunDirs } from "./paths.ts";
import { userInfo } from "node:os";
import type { Config } from "../config/config.ts";
import type { Logger } from "../util/log.ts";
import { ownUserRuns, prepareRunAs, resolveRunAs, type TestRunAs } from "./engine/identity.ts";
import { TestRunService } from "./runs/service.ts";
import { RunStore, type RunChange } from "./runs/store.ts";
import { relayRunChanges } from "./runs/relay.ts";
import { after } from "../util/time.ts";

/** How long after the start the runs' containment is chosen and logged, unless a run asks first: the choice starts probe programs, which a start need not wait for. */
const CONTAINMENT_CHOICE_DELAY_MS = 1_000;

/** The test-run server's services, as the routers get them. */
export interface TestRunDomain {
  /** Uploaded configs; the run engine reads them too. */
  configs: ConfigStore;
  /** Parsed test-suite and override-hint views of the configs, kept while their files are unchanged. */
  views: ConfigViewCache;
  runs: TestRunService;
  /** Every change of a run or trigger record, once on disk, this node's and the other nodes' (`GET /api/v1/test-runs/stream`). */
  changes: Broadcaster<RunChange>;
}

/**
 * `test_server.run_as` at start (prepareRunAs). Without it, tests run as the server's own user,
 * and the log says once what that means. What holds a run's processes is chosen and logged later
 * (createTestRunDomain).
 */
export function testIdentityOf(config: Config, log: Logger): TestRunAs {
  const spec = config.test_server.run_as;
  if (!spec) {
    log.warn(
      `test_server.run_as is not set: test configs run their commands as this server's user (${userInfo().username}, uid ${process.getuid?.()}), who can read and change everything in the data dir; an account with svc_tests_rw can do whatever this user can (README: "Who tests run as")`,
    );
  }
  const runAs = spec ? prepareRunAs(resolveRunAs(spec), config.data_dir, config.test_server.work_dir || `${config.data_dir}-runs`, { runAs: "config key test_server.run_as", workDir: "config key test_server.work_dir" }) : ownUserRuns();
  return runAs;
}

/**
 * `hub`: the device sockets, for runs on managed devices (none: device targets are refused).
 * `runAs`: who tests run here (testIdentityOf, resolved before any domain starts).
 */
export function createTestRunDomain(ctx: AppContext, hub?: ChannelHub, runAs: TestRunAs = {}): TestRunDomain {
  // Made at start: clears the temp files of uploads a stop interrupted.
  const configs = new ConfigStore(testrunDirs(ctx.config).configs, ctx.config.test_server.max_config_bytes);
  const changes = new Broadcaster<RunChange>();
  let relay: (change: RunChange) => void = () => {};
  const store = new RunStore(ctx.store, (change) => {
    changes.emit(change);
    relay(change);
  });
  relay = relayRunChanges(ctx.cluster, store, (change) => changes.emit(change), (message) => ctx.log.warn(message));
  const runs = new TestRunService(ctx, configs, store, hub, runAs);
  runs.recoverFromRestart();
  const { containment } = runAs;
  if (containment) {
    const cancel = after(ctx.clock, CONTAINMENT_CHOICE_DELAY_MS, () => void containment.describe().then((line) => ctx.log.info(`testrun: ${line}`), (error: Error) => ctx.log.error(`testrun: choosing how runs are contained failed: ${error.message}`)));
    ctx.onClosing.push(cancel);
  }
  // Graceful shutdown: pending and running runs end `aborted` with `server shutdown`.
  ctx.onShutdown.push(() => runs.shutdown());
  return { configs, views: new ConfigViewCache(configs), runs, changes };
}
