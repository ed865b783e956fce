import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { test } from "node:test";
import { startServe } from "../helpers/cli.ts";
import { removeDir, startTestServer, tempDir, waitFor } from "../helpers/server.ts";
import { SERVER_URL_FILE } from "../../src/server/start.ts";
import { holdEventLoop } from "../../src/util/event-loop.ts";
import { mimeTypes } from "../../src/util/mime.ts";

/** Whether a CommonJS package of node_modules has been loaded into this process (issue 31: what a start loads). */
const loaded = (name: string) => Object.keys(createRequire(import.meta.url).cache).some((path) => path.includes(`/node_modules/${name}/`));

test("a server's start leaves mime-types unloaded: its tables are built for the first file answer", async () => {
  const server = await startTestServer();
  try {
    assert.equal((await server.request("/api/health")).status, 200);
    assert.equal(loaded("mime-types"), false, "mime-types was loaded by the start");
    // What the first file answer does: it is then loaded (the check above sees it).
    assert.equal((await mimeTypes()).lookup("report.html"), "text/html");
    assert.equal(loaded("mime-types"), true);
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
});

test("server.url: written whole at start (temp file and rename, no fsync), removed at shutdown", async () => {
  const server = await startTestServer();
  const file = join(server.dataDir, SERVER_URL_FILE);
  try {
    assert.equal(readFileSync(file, "utf8"), `${server.url}\n`);
    assert.deepEqual(readdirSync(server.dataDir).filter((name) => name.endsWith(".tmp")), []);
  } finally {
    await server.close();
    assert.equal(existsSync(file), false);
    removeDir(server.dataDir);
  }
});

test("holdEventLoop: a timer keeps the event loop turning while the work is pending, and none is left once it settled or failed", async () => {
  const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;
  const before = timers();
  let finish!: (value: string) => void;
  const held = holdEventLoop(new Promise<string>((resolve) => (finish = resolve)));
  assert.equal(timers(), before + 1);
  finish("started");
  assert.equal(await held, "started");
  assert.equal(timers(), before);
  await assert.rejects(holdEventLoop(Promise.reject(new Error("no start"))), /no start/);
  assert.equal(timers(), before);
});

test("/api/health names the engine and its schema version beside the embedded database's own fields; the embedded default's start loads neither pg nor Kysely's PostgreSQL side", async () => {
  const server = await startTestServer();
  try {
    const res = await server.request("/api/health");
    assert.equal(res.status, 200);
    const { database } = (await res.json()) as { database: Record<string, unknown> };
    const { migrations } = await import("../../src/db/migrations/index.ts");
    assert.equal(database.schema_version, Math.max(...migrations.map((m) => m.version)));
    assert.equal(database.state, "ok");
    if (process.env.LABGATE_TEST_DATABASE === "postgres") {
      assert.equal(database.engine, "postgres");
    } else {
      assert.equal(database.engine, "embedded");
      for (const field of ["wasm", "image_bytes", "journal_bytes", "generation", "last_checkpoint"]) assert.ok(field in database, field);
      assert.equal(loaded("pg"), false, "pg was loaded by an embedded start");
    }
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
});

/**
 * Preloaded into a started `labgate serve`: when the first request comes, it writes the programs
 * the process had started, the built-in modules it had loaded and where its zod schemas were
 * built (the innermost module whose top level, or the lazy builder, made each) to START_PROBE_OUT.
 * Schemas are seen through zod's constructor hook (its global config's `postProcessor`, which zod
 * keeps internal: the test fails, not passes, if it stops being called).
 */
const START_PROBE = `
const schemaSites = {};
// The call sites' function names, which cost less than a formatted stack for each of thousands of schemas.
const siteOf = (_error, frames) => {
  const names = frames.map((frame) => frame.getFunctionName() ?? "");
  return names.find((name) => name === "buildMessages" || name === "get object") ?? names.find((name) => /^src\\/\\S+\\.ts$/.test(name)) ?? "(elsewhere)";
};
globalThis.__zod_globalConfig = {
  postProcessor() {
    const { prepareStackTrace, stackTraceLimit } = Error;
    Error.prepareStackTrace = siteOf;
    Error.stackTraceLimit = 100;
    const holder = {};
    Error.captureStackTrace(holder);
    const site = holder.stack;
    Error.prepareStackTrace = prepareStackTrace;
    Error.stackTraceLimit = stackTraceLimit;
    schemaSites[site] = (schemaSites[site] ?? 0) + 1;
  },
};
const childProcess = require("node:child_process");
const http = require("node:http");
const started = [];
for (const name of ["spawn", "spawnSync", "execFile", "execFileSync", "exec", "execSync", "fork"]) {
  const original = childProcess[name];
  childProcess[name] = function (...args) { started.push(String(args[0])); return original.apply(this, args); };
}
require("node:module").syncBuiltinESMExports();
const emit = http.Server.prototype.emit;
let written = false;
http.Server.prototype.emit = function (event, ...args) {
  if (event === "request" && !written) {
    written = true;
    const builtins = process.moduleLoadList.filter((entry) => entry.startsWith("NativeModule ")).map((entry) => entry.slice("NativeModule ".length));
    require("node:fs").writeFileSync(process.env.START_PROBE_OUT, JSON.stringify({ started, builtins, schemaSites }));
  }
  return emit.call(this, event, ...args);
};
`;

test("a server's start runs no program, leaves node:readline unloaded and builds neither the device messages' nor the test modules' schemas by its first answer: the runs' containment is chosen later, reports are read later, schemas built on first use", async () => {
  const dir = tempDir();
  const probe = join(dir, "probe.cjs");
  const out = join(dir, "probe.json");
  writeFileSync(probe, START_PROBE);
  const dataDir = join(dir, "data");
  const server = await startServe(["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], { env: { NODE_OPTIONS: `--require ${probe}`, START_PROBE_OUT: out, LABGATE_CONFIG: "" } });
  try {
    assert.equal((await fetch(`${server.url}/api/health`)).status, 200);
    const { started, builtins, schemaSites } = JSON.parse(readFileSync(out, "utf8")) as { started: string[]; builtins: string[]; schemaSites: Record<string, number> };
    assert.deepEqual(started, [], "programs started before the first answer");
    assert.ok(builtins.includes("http"), "the probe saw the start's built-in modules");
    assert.equal(builtins.includes("readline"), false, "node:readline was loaded by the start");
    assert.ok((schemaSites["src/config/config.ts"] ?? 0) > 0, `the probe saw the config's schemas being built: ${JSON.stringify(schemaSites)}`);
    // The device messages are built for the first frame a device sends, a module's params for the first entry checked.
    const early = Object.keys(schemaSites).filter((site) => /^(buildMessages|get object|src\/protocol\/labgate\/|src\/testrun\/modules\/)/.test(site));
    assert.deepEqual(early, [], "schemas built by the start that no request had needed yet");
    // Shortly after the start the containment is chosen (its probe programs run then) and logged.
    await waitFor(() => /testrun: (each run's processes|a run's processes)/.test(server.stderr()), 5000, "the containment's log line");
  } finally {
    await server.stop();
    removeDir(dir);
  }
});
