import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig, type Config } from "../../src/config/config.ts";
import { SCOPES, type Scope } from "../../src/auth/scopes.ts";
import { startServer, type RunningServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import type { Clock } from "../../src/util/time.ts";

/** The server's clock in tests: real time plus however far the test moved it (never back). */
export class TestClock implements Clock {
  private offset = 0;
  now(): number {
    return Date.now() + this.offset;
  }
  /** Moves the server's time forward: what expires after `ms` has expired. */
  advance(ms: number): void {
    this.offset += ms;
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

/** Polls `check` until it returns a truthy value, for states no event announces (fails after `ms`). */
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

export const tempDir = (label = "labgate-test-"): string => mkdtempSync(join(tmpdir(), label));

export type ConfigPatch = { [K in keyof Config]?: Config[K] extends object ? Partial<Config[K]> : Config[K] };

/** Starts a real server in-process on 127.0.0.1 and a free port, on a fresh (or given) data dir. */
export async function startTestServer(patch: ConfigPatch = {}, dataDir = tempDir()): Promise<TestServer> {
  const { config } = loadConfig({ env: {}, cwd: dataDir, flags: { dataDir, listen: "127.0.0.1:0" } });
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
    async close() {
      await server.close();
    },
  };
}

export const removeDir = (dir: string) => rmSync(dir, { recursive: true, force: true });
