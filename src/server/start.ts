import { existsSync, mkdirSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import { serve, type ServerType, type WebSocketServerLike } from "@hono/node-server";
import type { IncomingMessage, Server } from "node:http";
import type { Config } from "../config/config.ts";
import type { Database } from "../db/index.ts";
import { openDatabase, type OpenedDatabase } from "../db/open.ts";
import { redactedUrl } from "../db/url.ts";
import { openObjectStore } from "../storage/open.ts";
import { loadPostgresPart } from "../db/parts.ts";
import { nodeNameOf, PEER_USER, singleNode, type Cluster } from "../cluster/cluster.ts";
import { accountsExist, createFirstAdmin } from "../accounts/accounts.ts";
import { createAccountsDomain } from "../accounts/domain.ts";
import { loadOrCreateKeys } from "../auth/keys.ts";
import { SCOPES } from "../auth/scopes.ts";
import { TokenService } from "../auth/tokens.ts";
import { Hono } from "hono";
import { createApp, normalizeRequest } from "../http/app.ts";
import type { Operation } from "../http/openapi.ts";
import { createLogger, type Logger } from "../util/log.ts";
import { writeFileAtomic, writeFileDurable } from "../util/files.ts";
import { after, dateOf, systemClock, type Clock } from "../util/time.ts";
import { describeBuild, VERSION } from "../version.ts";
import { ConnectionTracker } from "./connections.ts";
import { writeDateHeaders } from "./date-header.ts";
import { acquireLock } from "../util/lock.ts";
import { readTlsCredentials, type TlsCredentials } from "./tls.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { routeTable, type Domains } from "./routes.ts";
import { createSharedServices } from "./shared.ts";
import { createTestRunDomain, testIdentityOf } from "../testrun/domain.ts";
import { validateDeployments } from "../testrun/devices/validation.ts";
import { createUpdateDomain } from "../update/domain.ts";
import { createLabDomain, joinDeployments } from "../lab/domain.ts";
import { acceptUpgradesOnlyOn, HandshakeFirstServer, releaseUpgradeBody } from "./upgrade.ts";
import { nodeResponse } from "../http/transport.ts";
import { EarlyAnswerRequest, EarlyAnswerResponse, onClosingConnection } from "./early-answer.ts";

export const ADMIN_TOKEN_FILE = "admin.token";
/**
 * Where a running server says how this machine reaches it (a loopback URL), for the CLI's
 * commands that change the database while it runs (`labgate user ...`). Removed on shutdown.
 */
export const SERVER_URL_FILE = "server.url";
const SHUTDOWN_GRACE_MS = 10_000;
/** Seconds a node's token for a call to another node lasts. */
const PEER_TOKEN_TTL = 120;
/** Largest WebSocket message accepted (action output arrives base64 in one message). */
const WS_MAX_PAYLOAD = 16 * 1024 * 1024;

export interface RunningServer {
  ctx: AppContext;
  /** The embedded database's files (checkpoints, its journal's state); undefined on PostgreSQL. */
  embedded: Database | undefined;
  /** The services the composition roots built (startDomains). */
  domains: Domains;
  /** The operations the routers registered with their routes (src/http/openapi.ts, `route`). */
  operations: readonly Operation[];
  /** The Hono app serving every route (src/server/routes.ts). */
  app: Hono<AppEnv>;
  /** Base URL the server answers on, e.g. `http://127.0.0.1:5000` (`https` with `tls`). */
  url: string;
  port: number;
  /**
   * Reads the TLS certificate and key again and uses them for new connections; open ones keep
   * theirs. Throws ConfigError (and keeps the old pair) when the files are bad; no-op without TLS.
   */
  reloadTls(): void;
  /** Path of the admin token written on first start, if this start wrote one. */
  adminTokenFile: string | undefined;
  /** Path of the console account `admin`'s initial password, if this start created the account. */
  adminPasswordFile: string | undefined;
  /** Stops accepting, finishes in-flight requests, flushes the database, releases the data dir. */
  close(): Promise<void>;
}

export interface StartOptions {
  log?: Logger;
  /** The server's time (default: the system's); tests pass one they can move. */
  clock?: Clock;
}

/**
 * What runs at start, in this order. Each composition root builds its part's services and hooks
 * (the device and account gates, device-socket handlers, deletion hooks), starts its timers and
 * registers its shutdown work on `ctx`; it changes nothing else in `ctx`. The app gets the gates
 * and the routers the services it returns, and only route (src/server/routes.ts). Backup has no services of its own: each request takes a snapshot.
 */
export async function startDomains(ctx: AppContext): Promise<Domains> {
  // Who tests run as: checked first, so that a start it refuses (exit 2) has started nothing yet.
  const runAs = testIdentityOf(ctx.config, ctx.log);
  // The account gate (tokens act as their account stands now), the login throttle.
  const accounts = createAccountsDomain(ctx);
  // The access watch (an account or token change ends streams and shells), event streams, in-flight requests.
  const shared = createSharedServices(ctx, accounts.accountGate);
  // The device gate, the orphan-object sweep, progress expiry, the device socket hub with its
  // handlers (progress, actions, file transfers), shells, deletion hooks, the download sweep.
  const update = createUpdateDomain(ctx);
  // The config store, the run queue: runs left unfinished by the last process are aborted.
  // Runs on managed devices go through the update server's device sockets.
  const testRun = createTestRunDomain(ctx, update.hub, runAs);
  // A deployment's validation runs a test config on each device that installed.
  await validateDeployments(ctx, update.deployments, testRun.runs, update.hub);
  // The board lab: power ports of lab.boards (their commands run as the test user), console captures;
  // runs on a board leave its console span as an artifact.
  const lab = await createLabDomain(ctx, runAs);
  testRun.runs.attachLab(lab);
  joinDeployments(ctx, lab, update.deployments);
  return { shared, accounts, update, testRun, lab };
}

/**
 * The one app serving every route over the domains, and the operations its routers registered
 * (for the OpenAPI document). It needs no listener: tests call `app.request` on it in process.
 */
export function serverApp(ctx: AppContext, domains: Domains): { app: Hono<AppEnv>; operations: Operation[] } {
  // createApp fills `operations` as it mounts the routers.
  const operations: Operation[] = [];
  const app = createApp(ctx, {
    modules: routeTable(domains, operations),
    inFlight: domains.shared.inFlight,
    refusals: domains.shared.refusals,
    gates: { device: domains.update.deviceGate, account: domains.accounts.accountGate },
    operations,
  });
  return { app, operations };
}

/** Opens the data dir, starts the domains (startDomains) and serves both APIs on the configured listener. */
export async function startServer(config: Config, options: StartOptions = {}): Promise<RunningServer> {
  const log = options.log ?? createLogger(config.log_level, { format: config.log_format });
  log.info(`${describeBuild()} starting`);
  // Checked before the data dir is touched: a bad pair exits 2 naming the key.
  const tls = config.tls.cert_file ? readTlsCredentials(config.tls) : undefined;
  const dataDir = config.data_dir;
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const releaseLock = acquireLock(dataDir);
  let opened: OpenedDatabase | undefined;
  let started: AppContext | undefined;
  let cluster: Cluster | undefined;
  try {
    opened = await openDatabase({
      dataDir,
      url: config.database.url,
      checkpointIntervalMs: config.database.checkpoint_interval * 1000,
      checkpointBytes: config.database.checkpoint_bytes,
      log: (level, message) => log[level](message),
    });
    const { store, applied } = opened;
    if (config.database.url) log.info(`database: PostgreSQL at ${redactedUrl(config.database.url)}`);
    if (applied.length > 0) log.info(`database migrated to schema ${applied[applied.length - 1]}`);

    const clock = options.clock ?? systemClock;
    const tokens = new TokenService(loadOrCreateKeys(dataDir), config.prefix, clock);
    let adminTokenFile: string | undefined;
    // The first start is decided by the data, not by whether this open migrated: a first start killed
    // after migrating (or a database made from a migrated copy) still has no account, so it still writes the token.
    const firstStart = !(await accountsExist(store));
    if (firstStart && !existsSync(join(dataDir, ADMIN_TOKEN_FILE))) {
      adminTokenFile = join(dataDir, ADMIN_TOKEN_FILE);
      writeFileDurable(adminTokenFile, tokens.issueManagement("admin", [...SCOPES], config.console.admin_token_ttl) + "\n", 0o600);
    }
    const adminPasswordFile = await createFirstAdmin(store, dataDir, config.prefix, dateOf(clock));

    const objects = await openObjectStore(config, (message) => log.warn(message));
    if (objects.driver === "s3") log.info(`storage: S3 bucket ${config.storage.s3.bucket}${config.storage.s3.proxy ? " (downloads through labgate)" : ""}`);
    const name = nodeNameOf(config.cluster.node_name);
    cluster = config.database.url
      ? await (await loadPostgresPart()).startClusterNode({ url: config.database.url, name, advertiseUrl: config.cluster.advertise_url, version: VERSION, log: (level, message) => log[level](message), peerToken: () => tokens.issueManagement(PEER_USER, [...SCOPES], PEER_TOKEN_TTL) })
      : singleNode(name, config.cluster.advertise_url);
    const ctx: AppContext = (started = { config, dataDir, store, tokens, log, version: VERSION, clock, startedAt: dateOf(clock), objects, cluster, onClosing: [], onShutdown: [] });
    const domains = await startDomains(ctx);
    // The deployments' plans are in memory before the first update check.
    await domains.update.deployments.ready;
    // Runs the last process left unfinished are aborted, and what they started killed, before the first request.
    await domains.testRun.runs.recoveredFromRestart;
    // Entries of commands run while no server ran are in the log before the first request.
    await domains.shared.auditSpool.ingest();
    const { app, operations } = serverApp(ctx, domains);
    // WebSocket routes (the device channel) upgrade through @hono/node-server and `ws`.
    const wss = new HandshakeFirstServer({ noServer: true, maxPayload: WS_MAX_PAYLOAD });
    const server = await listen(config, tls, wss, (request, env) => {
      // A request behind an answer that closes its connection is not served (its answer could not go out).
      const incoming = (env as { incoming?: IncomingMessage }).incoming;
      if (incoming && onClosingConnection(incoming)) return new Response(null, { status: 400 });
      const response = app.fetch(normalizeRequest(request), env);
      // No Node response: an upgrade request, of which only the status and headers are used.
      return nodeResponse(env) ? response : releaseUpgradeBody(response);
    });
    acceptUpgradesOnlyOn(server);
    const connections = new ConnectionTracker(server as Server, tls !== undefined);
    const port = (server.address() as AddressInfo).port;
    const host = config.listen.host.includes(":") ? `[${config.listen.host}]` : config.listen.host;
    const scheme = tls ? "https" : "http";
    const urlFile = join(dataDir, SERVER_URL_FILE);
    // Read only while this process holds the data dir's lock (src/cli/users.ts): after a crash it
    // means nothing, so it is written without fsyncs, which delayed the start.
    writeFileAtomic(urlFile, `${scheme}://${localHost(host)}:${port}\n`);

    let closing: Promise<void> | undefined;
    const close = () =>
      (closing ??= (async () => {
        for (const hook of ctx.onClosing) hook();
        // Upgraded sockets are not HTTP connections: server.close() would wait for them.
        for (const client of wss.clients) client.terminate();
        await new Promise<void>((resolve) => {
          const cancelForce = after(ctx.clock, SHUTDOWN_GRACE_MS, () => (server as Server).closeAllConnections());
          server.close(() => {
            cancelForce();
            resolve();
          });
          // Requests in flight finish (within the grace period); connections without one go now.
          (server as Server).closeIdleConnections();
          connections.closeWithoutRequest();
        });
        for (const hook of ctx.onShutdown) await hook();
        await cluster!.close();
        await opened!.close();
        rmSync(urlFile, { force: true });
        releaseLock();
      })());

    const reloadTls = () => {
      if (tls) (server as HttpsServer).setSecureContext(readTlsCredentials(config.tls));
    };
    return { ctx, embedded: opened.db, domains, operations, app, url: `${scheme}://${host}:${port}`, port, reloadTls, adminTokenFile, adminPasswordFile, close };
  } catch (error) {
    // What the domains started before the failure (timers, sweeps, node polls) stops, so that a
    // refused start leaves nothing running in a process that goes on (tests, `labgate` as a library).
    if (started) await stopDomains(started, log);
    await cluster?.close().catch(() => {});
    await opened?.close().catch(() => {});
    releaseLock();
    throw error;
  }
}

export async function stopDomains(ctx: AppContext, log: Logger): Promise<void> {
  for (const hook of ctx.onClosing) {
    try {
      hook();
    } catch (error) {
      log.warn(`stopping after a failed start: ${(error as Error).message}`);
    }
  }
  for (const hook of ctx.onShutdown) await Promise.resolve().then(hook).catch((error: Error) => log.warn(`stopping after a failed start: ${error.message}`));
}

/** The listen host as this machine reaches it: a wildcard address is reached on loopback. */
const localHost = (host: string) => (host === "0.0.0.0" ? "127.0.0.1" : host === "[::]" ? "[::1]" : host);

function listen(
  config: Config,
  tls: TlsCredentials | undefined,
  wss: HandshakeFirstServer,
  fetch: (request: Request, env: unknown) => Response | Promise<Response>,
): Promise<ServerType> {
  return new Promise((resolve, reject) => {
    const websocket = { server: wss as unknown as WebSocketServerLike };
    // Answers sent before their request's body is in close their connection (src/server/early-answer.ts).
    const serverOptions = { IncomingMessage: EarlyAnswerRequest, ServerResponse: EarlyAnswerResponse };
    const transport = tls ? { createServer: createHttpsServer, serverOptions: { ...tls, ...serverOptions } } : { serverOptions };
    const server = serve({ fetch, hostname: config.listen.host, port: config.listen.port, websocket, ...transport }, () => resolve(server));
    writeDateHeaders(server as Server);
    server.once("error", reject);
  });
}
