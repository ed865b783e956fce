import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before } from "node:test";
import { loadConfig, type Config } from "../../src/config/config.ts";
import { SCOPES, type Scope } from "../../src/auth/scopes.ts";
import { startServer, type RunningServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import { databaseUrlFor, dropDatabaseFor } from "./test-database.ts";
import type { Clock } from "../../src/util/time.ts";
import { testDb, type TestDb } from "./db.ts";

/**
 * The clock of a server or agent in tests: real time plus however far the test moved it (never
 * back). A sleep on it ends when its time is reached, by real time passing or by `advance`.
 */
export class TestClock implements Clock {
  private offset: number;
  private readonly waits = new Set<{ until: number; wake: () => void }>();
  /** The length (ms) of every sleep begun on this clock, in order. */
  readonly sleeps: number[] = [];
  private readonly onSleep = new Set<() => void>();

  /** `offset`: how far (ms) its time starts from real time (a device whose clock is off). */
  constructor(offset = 0) {
    this.offset = offset;
  }
  /** Real time when `freeze` stopped the clock following it. */
  private frozenAt: number | undefined;
  now(): number {
    return (this.frozenAt ?? Date.now()) + this.offset;
  }
  /** Stops its time following real time (`advance` still moves it) until `thaw`: for moments that must share a second however long a request between them takes. */
  freeze(): void {
    this.frozenAt ??= Date.now();
  }
  /** Its time follows real time again, on from where it stood. */
  thaw(): void {
    if (this.frozenAt === undefined) return;
    this.offset -= Date.now() - this.frozenAt;
    this.frozenAt = undefined;
  }
  /** Moves the time forward (whole ms, rounded up, as Date.now() counts): what expires after `ms` has expired, sleeps that end by then end. */
  advance(ms: number): void {
    this.offset += Math.ceil(ms);
    const now = this.now();
    for (const wait of [...this.waits]) if (wait.until <= now) wait.wake();
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waits.delete(wait);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const wait = { until: this.now() + ms, wake: done };
      const timer = setTimeout(done, ms);
      this.waits.add(wait);
      signal?.addEventListener("abort", done, { once: true });
      if (signal?.aborted) done();
      this.sleeps.push(ms);
      for (const notify of [...this.onSleep]) notify();
    });
  }
  /** The length (ms) of the `index`-th sleep begun on this clock (0: the first), once it has begun; fails after `ms`. */
  sleepBegun(index: number, ms = 5000): Promise<number> {
    return this.sleepWhere(() => this.sleeps.length > index, `sleep ${index}`, ms).then(() => this.sleeps[index]);
  }
  /** Resolves once a sleep (a deadline) of `length` ms has begun on this clock, or had begun before; fails after `ms`. */
  sleepOf(length: number, ms = 5000): Promise<void> {
    return this.sleepWhere(() => this.sleeps.includes(length), `a sleep of ${length} ms`, ms);
  }
  private sleepWhere(begun: () => boolean, what: string, ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.onSleep.delete(check);
        reject(new Error(`timed out waiting for ${what} (${this.sleeps.length} begun)`));
      }, ms);
      const check = () => {
        if (!begun()) return;
        clearTimeout(timer);
        this.onSleep.delete(check);
        resolve();
      };
      this.onSleep.add(check);
      check();
    });
  }
}

export interface TestServer {
  server: RunningServer;
  /** The server's clock: `clock.advance(ms)` instead of waiting for an expiry. */
  clock: TestClock;
  url: string;
  dataDir: string;
  /** A management token with every scope. */
  adminToken: string;
  /** Issues a management token for `user` with exactly `scopes`. */
  token(scopes: Scope[], user?: string, ttlSeconds?: number): string;
  /** fetch against the server; `token` becomes `Authorization: Bearer token=<token>`. */
  request(path: string, init?: RequestInit & { token?: string; json?: unknown }): Promise<Response>;
  /** One JSON request as admin (or with `token`): its status, headers and parsed body. */
  call<T = any>(method: string, path: string, json?: unknown, token?: string): Promise<Answer<T>>;
  /** The test's own SQL on the server's database, on either engine. */
  db: TestDb;
  close(): Promise<void>;
}

/** What TestServer.call answers: the body parsed as JSON (undefined when empty, the text when not JSON). */
export interface Answer<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/** TestServer.call over `request`. */
export function callWith(request: TestServer["request"], adminToken: string): TestServer["call"] {
  return async (method, path, json, token = adminToken) => {
    const res = await request(path, { method, token, ...(json === undefined ? {} : { json }) });
    const text = await res.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = text;
    }
    return { status: res.status, headers: res.headers, body: body as never };
  };
}

/**
 * Polls `check` until it returns a truthy value (fails after `ms`). Only for states that no event
 * announces and no clock decides; where one does, wait for it instead: a device's connect and
 * disconnect, a deployment's and its devices' states on `/api/stream`, a run's and a trigger's on
 * the test-run stream (openStream, events.ts; waitRun), a deadline on the server's clock
 * (TestClock.sleepOf/sleepBegun, then advance), a frame on a socket the test holds. What is left:
 * - operating-system state: processes gone, open file descriptors, files and temp files on disk;
 * - servers in a child process, or protoplaster stand-ins without an event stream: their output, their runs;
 * - server state with no event: pending registrations, stored capabilities and reported versions,
 *   action log statuses, progress records, the database's reload, event subscriber counts;
 * - the agent's own state (connected, its version) and work the test's own loops do (uploads);
 * - the async work a clock advance set off (the progress sweep) and console pages (a page's state).
 */
export async function waitFor<T>(check: () => T | Promise<T>, ms = 5000, what = "condition"): Promise<NonNullable<T>> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** TestServer.request for a server at `url` (also one running in a child process); `fetchImpl` e.g. trusts a test CA. */
export function requestAt(url: string, fetchImpl: typeof fetch = fetch): TestServer["request"] {
  return (path, init = {}) => {
    const headers = new Headers(init.headers);
    if (init.token) headers.set("authorization", `Bearer token=${init.token}`);
    let body = init.body;
    if (init.json !== undefined) {
      headers.set("content-type", "application/json");
      body = JSON.stringify(init.json);
    }
    return fetchImpl(url + path, { ...init, headers, body });
  };
}

/**
 * Every temp dir this test process made, removed when it exits whatever its tests did: a test
 * that failed half-way, an agent's or board's dir, a server's data dir that no hook removes.
 */
const made = new Set<string>();
process.once("exit", () => {
  for (const dir of made) removeDir(dir);
});

/** A fresh temp dir (removed at the latest when the test process exits). */
export function tempDir(label = "labgate-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), label));
  made.add(dir);
  return dir;
}

export type ConfigPatch = { [K in keyof Config]?: Config[K] extends object ? Partial<Config[K]> : Config[K] };

/**
 * Starts a real server in-process on 127.0.0.1 and a free port, on a fresh (or given) data dir; in
 * the PostgreSQL test mode on the data dir's own database (test-database.ts), unless `patch` sets
 * `database.url` itself (`""`: the embedded engine).
 */
export async function startTestServer(patch: ConfigPatch = {}, dataDir = tempDir()): Promise<TestServer> {
  const { config } = loadConfig({ env: {}, cwd: dataDir, flags: { dataDir, listen: "127.0.0.1:0" } });
  if (!(patch.database && "url" in patch.database)) config.database.url = (await databaseUrlFor(dataDir, "migrated")) ?? "";
  for (const [key, value] of Object.entries(patch)) {
    const current = (config as unknown as Record<string, unknown>)[key];
    (config as unknown as Record<string, unknown>)[key] =
      current && typeof current === "object" && !Array.isArray(current) ? { ...current, ...(value as object) } : value;
  }
  const quiet = createLogger(process.env.LABGATE_TEST_LOG ? "debug" : "error");
  const clock = new TestClock();
  const server = await startServer(config, { log: quiet, clock });
  const token = (scopes: Scope[], user = "tester", ttlSeconds = 3600) => server.ctx.tokens.issueManagement(user, scopes, ttlSeconds);
  const adminToken = token([...SCOPES], "admin");
  const request = requestAt(server.url);
  return {
    server,
    clock,
    url: server.url,
    dataDir,
    adminToken,
    token,
    request,
    call: callWith(request, adminToken),
    db: testDb(server.ctx.store),
    async close() {
      await server.close();
    },
  };
}

/** Removes a dir (a data dir's PostgreSQL database too, in the background: the run's cluster goes at its end anyway). */
export const removeDir = (dir: string) => {
  rmSync(dir, { recursive: true, force: true });
  void dropDatabaseFor(dir).catch(() => {});
};

/**
 * One server for the tests of a file (or of the describe block it is called in): started before
 * them, closed and its data dir removed after them. What it answers stands for that server while
 * the tests run. `setup` runs once it has started (uploads the tests share): Node 20 starts a
 * file's top-level `before` hooks together, so a second one could not count on the server yet.
 * `after` hooks run one by one in the order they were registered: one that must run before the
 * server closes (stopping agents) is registered before this call. A `patch` given as a function is
 * read when the server starts: it may name what an earlier hook of the same describe block made
 * (another server's URL, a fake board). In a describe block hooks run in order; at the top level of
 * a file Node 20 starts them together, so a second server's patch there first awaits the other's
 * `started`.
 */
export function useTestServer(
  patch: ConfigPatch | (() => ConfigPatch | Promise<ConfigPatch>) = {},
  setup?: (server: TestServer) => Promise<void>,
): TestServer & { restart(): Promise<void>; started: Promise<void> } {
  let current: TestServer | undefined;
  let config: ConfigPatch = {};
  let ready!: () => void;
  let failed!: (error: unknown) => void;
  /** Settles when the server has started and its `setup` has run. */
  const started = new Promise<void>((resolve, reject) => ((ready = resolve), (failed = reject)));
  started.catch(() => {}); // the hook that started it reports the failure
  /** Closes the server and starts it again on its data dir (a restart). */
  const restart = async () => {
    await current!.close();
    current = await startTestServer(config, current!.dataDir);
  };
  before(async () => {
    try {
      config = typeof patch === "function" ? await patch() : patch;
      current = await startTestServer(config);
      await setup?.(current);
      ready();
    } catch (error) {
      failed(error);
      throw error;
    }
  });
  after(async () => {
    if (!current) return;
    await current.close();
    removeDir(current.dataDir);
    await dropDatabaseFor(current.dataDir);
  });
  return new Proxy({} as TestServer & { restart(): Promise<void>; started: Promise<void> }, {
    get(_, key) {
      if (key === "restart") return restart;
      if (key === "started") return started;
      if (!current) throw new Error("useTestServer: the server starts in before(); use it in tests and hooks");
      return current[key as keyof TestServer];
    },
  });
}
