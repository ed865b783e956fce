/**
 * Benchmark (figures printed, nothing asserted): update checks per second and latency
 * percentiles against a real `labgate serve` process, next to a bare Hono route measured with
 * the same load generator in the same run.
 *
 *   node --import tsx scripts/bench/update-check.ts [--devices 10000] [--groups 100]
 *        [--packages 500] [--clients 50] [--seconds 10] [--seed-dir DIR] [--client raw|http|both]
 *        [--log-level warn|info] [--engine embedded|postgres|both]
 *
 * Set-up (in-process, then the server is restarted as its own process): N devices (rows and
 * device tokens minted with the appliance key), G groups with an exact_match policy and
 * P/G packages each (a chain of requires: deltas plus a full image), every device in one group.
 * `--seed-dir DIR` keeps the seeded data dir and tokens in DIR and reuses them on the next run
 * (seeding takes about a minute; the embedded engine only). BENCH_NODE_ARGS adds node flags to the
 * server (e.g. --cpu-prof). `--engine both` measures the embedded engine, then the same fleet on
 * PostgreSQL (a throwaway cluster on this machine, scripts/bench/engines.ts), whose CPU is printed
 * beside the server's and counted in the CPU per request.
 *
 * The load generator (loadgen.ts) runs as its own process, twice per target: the "raw" client
 * (pre-serialised requests on plain sockets, as wrk/autocannon do) and node:http's client. On
 * 2 cores the generator competes with the server for CPU, so both figures are printed along
 * with the CPU each process used and the server's CPU time per request, which other load on
 * the machine disturbs far less than throughput does.
 * Targets (issue 4): >= 8,000 checks/s, p99 < 25 ms on 2 cores, ratio to the bare route >= 0.12;
 * on PostgreSQL (issue 42), its CPU on the same 2 cores: >= 4,000 checks/s, p99 < 25 ms.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../src/config/config.ts";
import { startServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import type { LoadRequest, LoadResult, LoadSpec } from "./loadgen.ts";
import { listening } from "./server.ts";
import { flag, textFlag } from "./flags.ts";
import { activityPerRequest, benchEngines, databaseUrlOf, postgresActivity, postgresCpuSeconds, seedDevices, stopBenchPostgres, type BenchEngine } from "./engines.ts";

const DEVICES = flag("devices", 10_000);
const GROUPS = flag("groups", 100);
const PACKAGES = flag("packages", 500);
const CLIENTS = flag("clients", 50);
const SECONDS = flag("seconds", 10);
const PER_GROUP = Math.max(1, Math.floor(PACKAGES / GROUPS));
const SEED_DIR = textFlag("seed-dir");
/** Which load generator clients to run: raw, http or both (default). */
const LOG_LEVEL = textFlag("log-level") ?? "warn";
const CLIENT_KINDS = (textFlag("client") ?? "both") === "both" ? (["raw", "http"] as const) : ([textFlag("client") as "raw" | "http"] as const);

const ENGINES = benchEngines();
const work = SEED_DIR ?? mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-check-"));
const targetsFile = join(work, `targets-${DEVICES}-${GROUPS}-${PACKAGES}.json`);

interface Target {
  token: string;
  body: string;
}

async function seed(dataDir: string, databaseUrl: string): Promise<Target[]> {
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir, listen: "127.0.0.1:0" } });
  config.database.url = databaseUrl;
  const server = await startServer(config, { log: createLogger("error") });
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 3600);
  const call = async (method: string, path: string, body?: unknown, form?: FormData) => {
    const res = await fetch(server.url + path, {
      method,
      headers: { authorization: `Bearer token=${admin}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: form ?? (body === undefined ? undefined : JSON.stringify(body)),
    });
    if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<{ id: number }>;
  };

  const deviceIds = await seedDevices(server.ctx.store, DEVICES, 0x020000000000);

  const targets: Target[] = [];
  for (let g = 0; g < GROUPS; g++) {
    const ids: number[] = [];
    for (let v = 1; v <= PER_GROUP; v++) {
      const form = new FormData();
      form.set("svc.software.version", `g${g}-v${v + 1}`);
      form.set("svc.hardware.devtype", "board");
      if (v > 1) form.set("requires:svc.software.version", `g${g}-v${v}`);
      form.set("file", new Blob([`package ${g}/${v}`]), "p.bin");
      ids.push((await call("POST", "/api/v1/packages", undefined, form)).id);
    }
    const group = await call("POST", "/api/v2/groups", { metadata: { name: `group ${g}` }, priority: g });
    await call("POST", `/api/v2/groups/${group.id}/policy`, { policy: `exact_match,g${g}-v${PER_GROUP + 1}` });
    await call("POST", `/api/v2/groups/${group.id}/package`, { packages: ids });
    const members = deviceIds.filter((_, i) => i % GROUPS === g);
    await call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: members.map((d) => d.id), remove: [] });
    for (const device of members) {
      // Half the devices need the first hop, half are one hop from the target (200 either way);
      // every 10th already runs the target (204).
      const start = device.id % 10 === 0 ? PER_GROUP + 1 : device.id % 2 === 0 ? 1 : PER_GROUP;
      targets.push({
        token: server.ctx.tokens.issueDevice(device.mac_address, device.id, 30 * 86400),
        body: JSON.stringify({ "svc.software.version": `g${g}-v${start}`, "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.mac_address }),
      });
    }
  }
  await server.close();
  return targets;
}

async function spawnServer(args: string[], stderr: "inherit" | number = "inherit"): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), "--import", "tsx", ...args], {
    stdio: ["ignore", "pipe", stderr],
    env: { ...process.env, LABGATE_CONFIG: "" },
  });
  return listening(child);
}

/** CPU seconds (user + system) a process has used so far, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

interface Measured extends LoadResult {
  /** Cores the server process used while measured. */
  serverCores: number;
  /** Cores PostgreSQL's processes used meanwhile (0 on the embedded engine). */
  postgresCores: number;
}

/** Runs the load generator as its own process against `server`. */
async function load(server: ChildProcess, spec: LoadSpec): Promise<Measured> {
  const file = join(work, `load-${process.pid}.json`);
  writeFileSync(file, JSON.stringify(spec));
  const cpuBefore = cpuSeconds(server.pid!);
  const postgresBefore = await postgresCpuSeconds();
  const wallBefore = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "loadgen.ts"), file], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  const [code] = await once(child, "exit");
  if (code !== 0) throw new Error(`load generator exited with ${code}`);
  const result = JSON.parse(out) as LoadResult;
  // The server's CPU over the generator's whole life (start-up and warm-up included) is an upper
  // bound; scale it to the measured phase by wall time.
  const wall = (performance.now() - wallBefore) / 1000;
  const serverCores = (cpuSeconds(server.pid!) - cpuBefore) / wall;
  const postgresCores = ((await postgresCpuSeconds()) - postgresBefore) / wall;
  return { ...result, serverCores, postgresCores };
}

const fmt = (r: Measured) =>
  `${r.perSecond.toFixed(0).padStart(7)} req/s  p50 ${r.p50.toFixed(2).padStart(6)} ms  p99 ${r.p99.toFixed(2).padStart(6)} ms  ` +
  `server ${(((r.serverCores + r.postgresCores) / r.perSecond) * 1e6).toFixed(0).padStart(4)} us CPU/request  cpu cores: server ${r.serverCores.toFixed(2)}${r.postgresCores ? `, postgres ${r.postgresCores.toFixed(2)}` : ""}, generator ${r.cpuCores.toFixed(2)}  ` +
  `(${r.requests} requests; ${Object.entries(r.statuses).map(([s, n]) => `${s}: ${n}`).join(", ")}${r.errors ? `; ${r.errors} errors` : ""})`;

/** Sends every check once, `CLIENTS` at a time; how long it took (s). */
async function prime(url: string, checks: LoadRequest[]): Promise<number> {
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let i = next++; i < checks.length; i = next++) {
        const res = await fetch(url + checks[i].path, { method: "POST", headers: { authorization: `Bearer token=${checks[i].token}`, "content-type": "application/json" }, body: checks[i].body });
        await res.arrayBuffer();
      }
    }),
  );
  return (performance.now() - started) / 1000;
}

/** Seeds the fleet on `engine` (or reuses the seed dir's, embedded only) and measures its update checks with each client. */
async function measureEngine(engine: BenchEngine): Promise<Partial<Record<"raw" | "http", Measured>>> {
  const dataDir = join(work, engine === "embedded" ? "data" : "data-postgres");
  const reuse = engine === "embedded" && SEED_DIR !== undefined;
  const databaseUrl = await databaseUrlOf(engine);
  let targets: Target[];
  if (reuse && existsSync(targetsFile)) targets = JSON.parse(readFileSync(targetsFile, "utf8")) as Target[];
  else {
    if (reuse) {
      rmSync(dataDir, { recursive: true, force: true });
      mkdirSync(SEED_DIR!, { recursive: true });
    }
    targets = await seed(dataDir, databaseUrl);
    if (reuse) writeFileSync(targetsFile, JSON.stringify(targets));
  }
  const checks: LoadRequest[] = targets.map((t) => ({ method: "POST", path: "/api/v1/update/check", token: t.token, body: t.body }));

  // warn by default: at info every request writes a log line (--log-level info measures that too;
  // the server's stderr then goes to server.log in the work dir).
  writeFileSync(join(work, "bench.config.yaml"), `log_level: ${LOG_LEVEL}\n`);
  const logFile = LOG_LEVEL === "info" || LOG_LEVEL === "debug" ? openSync(join(work, `server-${engine}.log`), "w") : undefined;
  const database = databaseUrl ? ["--database-url", databaseUrl] : [];
  const labgate = await spawnServer(["src/main.ts", "serve", "--config", join(work, "bench.config.yaml"), "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...database], logFile);
  const checkRuns: Partial<Record<"raw" | "http", Measured>> = {};
  try {
    // Every device's first check writes its progress record: made once, before the warm-up (JIT, caches).
    const primed = await prime(labgate.url, checks);
    console.log(`${engine}: every device's first check (its progress record written) in ${primed.toFixed(1)} s`);
    const warmup = Math.max(2, targets.length / 4000);
    for (const client of CLIENT_KINDS) {
      const before = databaseUrl ? await postgresActivity(databaseUrl) : undefined;
      checkRuns[client] = await load(labgate.child, { url: labgate.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: warmup, client });
      // Warm-up included: an upper bound of what one check asks of the database.
      if (before) console.log(`${client}: ${activityPerRequest(before, await postgresActivity(databaseUrl), checkRuns[client]!.requests)} (warm-up included)`);
    }
  } finally {
    labgate.child.kill("SIGTERM");
    await once(labgate.child, "exit");
    if (logFile !== undefined) closeSync(logFile);
  }
  return checkRuns;
}

async function main(): Promise<void> {
  console.log(`labgate update-check benchmark: ${DEVICES} devices, ${GROUPS} groups, ${PER_GROUP * GROUPS} packages, ${CLIENTS} clients, ${SECONDS} s; engines: ${ENGINES.join(", ")}`);
  console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
  const byEngine: Partial<Record<BenchEngine, Partial<Record<"raw" | "http", Measured>>>> = {};
  try {
    for (const engine of ENGINES) byEngine[engine] = await measureEngine(engine);
  } finally {
    await stopBenchPostgres();
  }

  const bareRequests: LoadRequest[] = [{ method: "GET", path: "/bare" }];
  const bareRuns: Partial<Record<"raw" | "http", Measured>> = {};
  const bare = await spawnServer([
    "--input-type=module",
    "-e",
    `import { Hono } from "hono"; import { serve } from "@hono/node-server";
     const app = new Hono().get("/bare", (c) => c.json({ ok: true }));
     const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info) => console.log("listening on http://127.0.0.1:" + info.port));`,
  ]);
  try {
    for (const client of CLIENT_KINDS) bareRuns[client] = await load(bare.child, { url: bare.url, requests: bareRequests, connections: CLIENTS, seconds: SECONDS, warmupSeconds: 2, client });
  } finally {
    bare.child.kill("SIGTERM");
    await once(bare.child, "exit");
  }

  const targetsOf = { embedded: ">= 8000 checks/s, p99 < 25 ms, ratio >= 0.12", postgres: ">= 4000 checks/s with PostgreSQL's CPU on the same machine, p99 < 25 ms" };
  for (const client of CLIENT_KINDS) {
    const label = client === "raw" ? "raw-socket client (separate process)" : "node:http client (separate process)";
    console.log(`\n${label}:`);
    for (const engine of ENGINES) console.log(`  update check, ${engine.padEnd(8)}  ${fmt(byEngine[engine]![client]!)}`);
    console.log(`  bare Hono GET             ${fmt(bareRuns[client]!)}`);
    for (const engine of ENGINES) console.log(`  ratio, ${engine.padEnd(8)}         ${(byEngine[engine]![client]!.perSecond / bareRuns[client]!.perSecond).toFixed(3)}  (targets: ${targetsOf[engine]})`);
  }
  rmSync(join(work, `load-${process.pid}.json`), { force: true });
  if (!SEED_DIR) rmSync(work, { recursive: true, force: true });
}

await main();
