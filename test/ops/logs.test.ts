import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Hono } from "hono";
import { loadConfig } from "../../src/config/config.ts";
import { createApp } from "../../src/http/app.ts";
import type { AppEnv } from "../../src/app/context.ts";
import { startServer, type RunningServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import { removeDir, tempDir } from "../helpers/server.ts";

const dirs: string[] = [];
after(() => dirs.forEach(removeDir));

async function start(format: "text" | "json"): Promise<{ server: RunningServer; lines: string[] }> {
  const dataDir = tempDir();
  dirs.push(dataDir);
  const { config } = loadConfig({ env: {}, cwd: dataDir, flags: { dataDir, listen: "127.0.0.1:0" } });
  config.log_format = format;
  const lines: string[] = [];
  const server = await startServer(config, { log: createLogger("info", { format, write: (line) => lines.push(line) }) });
  return { server, lines };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("json logs: one object per line with time, level, message, request id, method, path, status, ms; X-Request-Id echoed", async () => {
  const { server, lines } = await start("json");
  try {
    const ok = await fetch(`${server.url}/api/health`);
    const id = ok.headers.get("x-request-id")!;
    assert.match(id, UUID);
    const missing = await fetch(`${server.url}/api/v1/nope`, { headers: { "x-request-id": "client-42.a" } });
    assert.equal(missing.status, 404);
    assert.equal(missing.headers.get("x-request-id"), "client-42.a", "a plain id the client sent is kept");
    const hostile = await fetch(`${server.url}/api/health`, { headers: { "x-request-id": "x\" level=error" } });
    assert.match(hostile.headers.get("x-request-id")!, UUID, "anything else is replaced");

    await new Promise((resolve) => setImmediate(resolve));
    const entries = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const health = entries.find((e) => e.request_id === id)!;
    assert.equal(health.level, "info");
    assert.equal(health.method, "GET");
    assert.equal(health.path, "/api/health");
    assert.equal(health.status, 200);
    assert.equal(typeof health.ms, "number");
    assert.ok(!Number.isNaN(Date.parse(health.time as string)));
    assert.match(health.message as string, /^GET \/api\/health 200 /);
    const notFound = entries.find((e) => e.request_id === "client-42.a")!;
    assert.deepEqual([notFound.status, notFound.path], [404, "/api/v1/nope"]);
    const startup = entries.find((e) => String(e.message).startsWith("database migrated"));
    assert.ok(startup && startup.request_id === undefined, "lines outside a request carry no request id");
  } finally {
    await server.close();
  }
});

test("an unexpected error's log line and its answer carry the same request id (text format)", async () => {
  const { server, lines } = await start("text");
  try {
    const failing = () => new Hono<AppEnv>().get("/boom", () => {
      throw new Error("kaboom");
    });
    const app = createApp(server.ctx, { modules: [failing] });
    const res = await app.request("/boom");
    assert.equal(res.status, 500);
    const id = res.headers.get("x-request-id")!;
    assert.match(id, UUID);
    const error = lines.find((l) => l.includes(" ERROR ") && l.includes("kaboom"));
    assert.ok(error, lines.join("\n"));
    assert.ok(error.includes(`[${id}]`), error);
    assert.ok(lines.some((l) => l.includes(` WARN  [${id}] GET /boom 500 `)), lines.join("\n"));
  } finally {
    await server.close();
  }
});
