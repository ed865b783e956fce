import { mkdirSync } from "node:fs";
import { openObjectStore } from "../../src/storage/open.ts";
import { singleNode } from "../../src/cluster/cluster.ts";
import type { Hono } from "hono";
import type { AppContext, AppEnv } from "../../src/app/context.ts";
import { loadOrCreateKeys } from "../../src/auth/keys.ts";
import { SCOPES, type Scope } from "../../src/auth/scopes.ts";
import { TokenService } from "../../src/auth/tokens.ts";
import { loadConfig } from "../../src/config/config.ts";
import { Database, migrate, migrations } from "../../src/db/index.ts";
import { embeddedStore } from "../../src/db/store.ts";
import { testDb, type TestDb } from "./db.ts";
import type { Operation } from "../../src/http/openapi.ts";
import type { Domains } from "../../src/server/routes.ts";
import { serverApp, startDomains, stopDomains } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import { VERSION } from "../../src/version.ts";
import { removeDir, tempDir, TestClock, type ConfigPatch } from "./server.ts";

/** The server's app, domains and context on a fresh data dir, without a listener: requests go through `app.request`. */
export interface InProcessApp {
  app: Hono<AppEnv>;
  ctx: AppContext;
  domains: Domains;
  operations: readonly Operation[];
  clock: TestClock;
  /** A management token for `user` with exactly `scopes`. */
  token(scopes: Scope[], user?: string): string;
  adminToken: string;
  /** One request to the app as `token` (none: no Authorization header), a JSON body when given. */
  request(method: string, path: string, options?: { token?: string; json?: unknown; body?: BodyInit; headers?: Record<string, string> }): Promise<Response>;
  /** The test's own SQL on the app's database, on either engine. */
  db: TestDb;
  /** Stops the domains (their closing and shutdown hooks), closes the database, removes the data dir. */
  close(): Promise<void>;
}

/** Builds what startServer builds, less the listener (src/server/start.ts: startDomains, serverApp). */
export async function inProcessApp(patch: ConfigPatch = {}): Promise<InProcessApp> {
  const dataDir = tempDir();
  mkdirSync(dataDir, { recursive: true });
  const { config } = loadConfig({ env: {}, cwd: dataDir, flags: { dataDir, listen: "127.0.0.1:0" } });
  for (const [key, value] of Object.entries(patch)) {
    const current = (config as unknown as Record<string, unknown>)[key];
    (config as unknown as Record<string, unknown>)[key] = current && typeof current === "object" && !Array.isArray(current) ? { ...current, ...(value as object) } : value;
  }
  const log = createLogger(process.env.LABGATE_TEST_LOG ? "debug" : "error");
  const clock = new TestClock();
  const db = await Database.open(dataDir);
  await migrate(db, migrations);
  const tokens = new TokenService(loadOrCreateKeys(dataDir), config.prefix, clock);
  const store = embeddedStore(db);
  const objects = await openObjectStore(config, (message) => log.warn(message));
  const ctx: AppContext = { config, dataDir, store, tokens, log, version: VERSION, clock, startedAt: new Date(clock.now()), objects, cluster: singleNode("test", ""), onClosing: [], onShutdown: [] };
  const domains = await startDomains(ctx);
  const { app, operations } = serverApp(ctx, domains);
  const token = (scopes: Scope[], user = "tester") => tokens.issueManagement(user, scopes, 3600);
  return {
    app,
    ctx,
    domains,
    operations,
    clock,
    token,
    adminToken: token([...SCOPES], "admin"),
    db: testDb(store),
    request(method, path, { token, json, body, headers = {} } = {}) {
      const all: Record<string, string> = { ...headers };
      if (token) all.authorization = `Bearer token=${token}`;
      if (json !== undefined) all["content-type"] = "application/json";
      return Promise.resolve(app.request(path, { method, headers: all, body: json === undefined ? body : JSON.stringify(json) }));
    },
    async close() {
      await stopDomains(ctx, log);
      await store.close();
      await db.close();
      removeDir(dataDir);
    },
  };
}
