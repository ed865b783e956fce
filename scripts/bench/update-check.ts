/**
 * Benchmark (figures printed, nothing asserted): update checks per second and latency
 * percentiles against a real `labgate serve` process, next to a bare Hono route measured with
 * the same load generator in the same run.
 *
 *   node --import tsx scripts/bench/update-check.ts [--devices 10000] [--groups 100]
 *        [--packages 500] [--clients 50] [--seconds 10] [--seed-dir DIR] [--client raw|http|both]
 *        [--log-level warn|info]
 *
 * Set-up (in-process, then the server is restarted as its own process): N devices (rows and
 * device tokens minted with the appliance key), G groups with an exact_match policy and
 * P/G packages each (a chain of requires: deltas plus a full image), every device in one group.
 * `--seed-dir DIR` keeps the seeded data dir and tokens in DIR and reuses them on the next run
 * (seeding takes about a minute). BENCH_NODE_ARGS adds node flags to the server (e.g. --cpu-prof).
 *
 * The load generator (loadgen.ts) runs as its own process, twice per target: the "raw" client
 * (pre-serialised requests on plain sockets, as wrk/autocannon do) and node:http's client. On
 * 2 cores the generator competes with the server for CPU, so both figures are printed along
 * with the CPU each process used and the server's CPU time per request, which other load on
 * the machine disturbs far less than throughput does.
 * Targets (issue 4): >= 8,000 checks/s, p99 < 25 ms on 2 cores, ratio to the bare route >= 0.12.
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
import { insertDevices, listening } from "./server.ts";
import { flag, textFlag } from "./flags.ts";

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

const work = SEED_DIR ?? mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-check-"));
const dataDir = join(work, "data");
const targetsFile = join(work, `targets-${DEVICES}-${GROUPS}-${PACKAGES}.json`);

interface Target {
  token: string;
  body: string;
}

async function seed(): Promise<Target[]> {
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir, listen: "127.0.0.1:0" } });
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

  await server.embedded!.write((tx) => insertDevices(tx, DEVICES, 0x020000000000));
  const deviceIds = server.embedded!.all<{ id: number; mac_address: string }>("SELECT id, mac_address FROM devices ORDER BY id");

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
}

/** Runs the load generator as its own process against `server`. */
async function load(server: ChildProcess, spec: LoadSpec): Promise<Measured> {
  const file = join(work, `load-${process.pid}.json`);
  writeFileSync(file, JSON.stringify(spec));
  const cpuBefore = cpuSeconds(server.pid!);
  const wallBefore = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "loadgen.ts"), file], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  const [code] = await once(child, "exit");
  if (code !== 0) throw new Error(`load generator exited with ${code}`);
  const result = JSON.parse(out) as LoadResult;
  // The server's CPU over the generator's whole life (start-up and warm-up included) is an upper
  // bound; scale it to the measured phase by wall time.
  const serverCores = (cpuSeconds(server.pid!) - cpuBefore) / ((performance.now() - wallBefore) / 1000);
  return { ...result, serverCores };
}

const fmt = (r: Measured) =>
  `${r.perSecond.toFixed(0).padStart(7)} req/s  p50 ${r.p50.toFixed(2).padStart(6)} ms  p99 ${r.p99.toFixed(2).padStart(6)} ms  ` +
  `server ${((r.serverCores / r.perSecond) * 1e6).toFixed(0).padStart(4)} us CPU/request  cpu cores: server ${r.serverCores.toFixed(2)}, generator ${r.cpuCores.toFixed(2)}  ` +
  `(${r.requests} requests; ${Object.entries(r.statuses).map(([s, n]) => `${s}: ${n}`).join(", ")}${r.errors ? `; ${r.errors} errors` : ""})`;

async function main(): Promise<void> {
  console.log(`labgate update-check benchmark: ${DEVICES} devices, ${GROUPS} groups, ${PER_GROUP * GROUPS} packages, ${CLIENTS} clients, ${SECONDS} s`);
  console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
  let targets: Target[];
  if (SEED_DIR && existsSync(targetsFile)) targets = JSON.parse(readFileSync(targetsFile, "utf8")) as Target[];
  else {
    if (SEED_DIR) {
      rmSync(dataDir, { recursive: true, force: true });
      mkdirSync(SEED_DIR, { recursive: true });
    }
    targets = await seed();
    if (SEED_DIR) writeFileSync(targetsFile, JSON.stringify(targets));
  }
  const checks: LoadRequest[] = targets.map((t) => ({ method: "POST", path: "/api/v1/update/check", token: t.token, body: t.body }));
  const bareRequests: LoadRequest[] = [{ method: "GET", path: "/bare" }];
  const results: Record<string, { checks: Measured; bare: Measured }> = {};

  // warn by default: at info every request writes a log line (--log-level info measures that too;
  // the server's stderr then goes to server.log in the work dir).
  writeFileSync(join(work, "bench.config.yaml"), `log_level: ${LOG_LEVEL}\n`);
  const logFile = LOG_LEVEL === "info" || LOG_LEVEL === "debug" ? openSync(join(work, "server.log"), "w") : undefined;
  const labgate = await spawnServer(["src/main.ts", "serve", "--config", join(work, "bench.config.yaml"), "--data-dir", dataDir, "--listen", "127.0.0.1:0"], logFile);
  const checkRuns: Partial<Record<"raw" | "http", Measured>> = {};
  try {
    // Warm-up: JIT, caches, and every device's first check (which writes its progress record).
    const warmup = Math.max(2, targets.length / 4000);
    for (const client of CLIENT_KINDS) {
      checkRuns[client] = await load(labgate.child, { url: labgate.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: warmup, client });
    }
  } finally {
    labgate.child.kill("SIGTERM");
    await once(labgate.child, "exit");
    if (logFile !== undefined) closeSync(logFile);
  }

  const bare = await spawnServer([
    "--input-type=module",
    "-e",
    `import { Hono } from "hono"; import { serve } from "@hono/node-server";
     const app = new Hono().get("/bare", (c) => c.json({ ok: true }));
     const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info) => console.log("listening on http://127.0.0.1:" + info.port));`,
  ]);
  try {
    for (const client of CLIENT_KINDS) {
      const baseline = await load(bare.child, { url: bare.url, requests: bareRequests, connections: CLIENTS, seconds: SECONDS, warmupSeconds: 2, client });
      results[client] = { checks: checkRuns[client]!, bare: baseline };
    }
  } finally {
    bare.child.kill("SIGTERM");
    await once(bare.child, "exit");
  }

  for (const [client, { checks: c, bare: b }] of Object.entries(results)) {
    const label = client === "raw" ? "raw-socket client (separate process)" : "node:http client (separate process)";
    console.log(`\n${label}:`);
    console.log(`  update check   ${fmt(c)}`);
    console.log(`  bare Hono GET  ${fmt(b)}`);
    console.log(`  ratio          ${(c.perSecond / b.perSecond).toFixed(3)}  (targets: >= 8000 checks/s, p99 < 25 ms, ratio >= 0.12)`);
  }
  rmSync(join(work, `load-${process.pid}.json`), { force: true });
  if (!SEED_DIR) rmSync(work, { recursive: true, force: true });
}

await main();
