/**
 * Benchmark (figures printed, nothing asserted): many connected devices on one server.
 *
 *   node --import tsx scripts/bench/device-sockets.ts [--devices 10000] [--procs 4] [--rounds 3]
 *        [--each-rounds N] [--baseline DIR|EXECUTABLE] [--server EXECUTABLE] [--turns N] [--settle S]
 *        [--busy] [--busy-rate N] [--checks S] [--no-unit-env] [--engine embedded|postgres|both]
 *
 * Seeds N devices, starts `labgate serve` as its own process, and connects every device from
 * `--procs` simulator processes (device-sim.ts: the WebSocket protocol only, not full agents).
 * Prints the server's RSS idle and with all connected (per socket), then sends the built-in
 * `trigger_update_check` action to all N at once (`GET .../action/exec/...` per device, 64
 * keep-alive connections) `--rounds` times while the load generator runs update checks, then
 * `--rounds` times as one fan-out request (`POST /api/v2/devices/action/exec` naming all N), and
 * prints the fan-out latencies (one device, all back) and the checks' p50/p99. With one request
 * per device, a device's time includes its wait for one of the 64 connections; a fan-out
 * request's devices all answer within its time ("all back").
 * N sockets need N file descriptors in the server (and in the simulators): `ulimit -n` must
 * allow it (this machine: 20,000). `--baseline` runs the same against another checkout (a
 * directory, on this Node from source) or an executable (`labgate serve`, as deployed); `--server`
 * makes "this tree" an executable too (e.g. dist/labgate); `--turns N` runs baseline and this tree
 * N times each, taking turns; `--settle S` waits S seconds (2) after the last fan-out and the update
 * checks before the settled figures (V8's memory relief after a fan-out takes up to 30), with
 * `--busy` while update checks go on (a server with traffic, where V8 alone keeps what it freed), at
 * full rate or `--busy-rate N` per second. `--rounds 0 --each-rounds 0` makes no fan-out at all: the
 * burst is then the update checks alone, for `--checks S` seconds (by default they last as long as
 * the fan-outs, 8 s per round of one request per device and 4 s per fan-out request). The
 * servers run with the `Environment=` settings of scripts/labgate.service (the deployed unit's,
 * e.g. MALLOC_ARENA_MAX) unless `--no-unit-env` (a variable set in the benchmark's own
 * environment wins).
 * `--engine both` runs everything on the embedded engine, then on PostgreSQL (a throwaway cluster on
 * this machine, scripts/bench/engines.ts, seeded by this tree), its CPU beside the server's.
 * BENCH_NODE_ARGS adds node flags to the server (e.g. --cpu-prof; NODE_OPTIONS for an executable).
 * Before the first fan-out and after each request the server also reports (memory-probe.cjs)
 * what it holds after a full collection: V8's live heap and the capacity it keeps, ArrayBuffers
 * and the wasm heaps, to tell growth from garbage.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Agent as UndiciAgent, request } from "undici";
import { pathToFileURL } from "node:url";
import type { LoadResult, LoadSpec } from "./loadgen.ts";
import { insertDevices, listening, simulators } from "./server.ts";
import { flag, textFlag } from "./flags.ts";
import { unitEnvironment } from "./unit-env.ts";
import { benchEngines, databaseUrlOf, postgresCpuSeconds, seedDevices, stopBenchPostgres, type BenchEngine } from "./engines.ts";
import { executableCommand } from "../../test/helpers/cli.ts";

const DEVICES = flag("devices", 10_000);
const PROCS = flag("procs", 4);
const ROUNDS = flag("rounds", 3);
const EACH_ROUNDS = flag("each-rounds", ROUNDS);
const TURNS = flag("turns", 1);
const SETTLE = flag("settle", 2);
const BUSY = process.argv.includes("--busy");
const BUSY_RATE = flag("busy-rate", 0);
const CHECKS = flag("checks", 8 * EACH_ROUNDS + 4 * ROUNDS);
const here = resolve(import.meta.dirname, "../..");
const BASELINE = textFlag("baseline") && resolve(textFlag("baseline")!);
const SERVER = textFlag("server") ? resolve(textFlag("server")!) : here;
/** A server is a checkout (run from source on this Node) or an executable. */
const isExecutable = (root: string) => statSync(root).isFile();
const unitEnv = unitEnvironment("labgate.service");
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-sockets-"));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
/** CPU time (user + system) a process has used, in ms (clock ticks of 10 ms). */
const cpuMs = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
};
const rssKiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const probeFile = join(work, "memory-probe.jsonl");
interface Probe {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  arrayBuffers: number;
  wasm: number;
  spaces: Record<string, { size: number; used: number }>;
  resident: { v8Pages: number; mallocMain: number; otherAnon: number; file: number };
}
/** The server's memory after a full collection (scripts/bench/memory-probe.cjs). */
async function probeMemory(pid: number): Promise<Probe> {
  const lines = () => (existsSync(probeFile) ? readFileSync(probeFile, "utf8").trim().split("\n").filter(Boolean) : []);
  const before = lines().length;
  process.kill(pid, "SIGUSR2");
  for (let i = 0; i < 600 && lines().length === before; i++) await sleep(50);
  return JSON.parse(lines().at(-1)!) as Probe;
}
const mib = (bytes: number) => (bytes / 1048576).toFixed(0);

/**
 * Seeds with the baseline checkout's own code when there is one: a newer tree migrates an older
 * data dir at its start, an older one cannot open a newer schema. (An executable baseline is
 * seeded by this tree: it must know this tree's migrations.)
 */
async function seed(seedDir: string, databaseUrl: string): Promise<{ admin: string; devices: { mac: string; token: string }[] }> {
  const root = BASELINE && !isExecutable(BASELINE) && !databaseUrl ? BASELINE : here;
  const { loadConfig } = (await import(pathToFileURL(join(root, "src/config/config.ts")).href)) as typeof import("../../src/config/config.ts");
  const { startServer } = (await import(pathToFileURL(join(root, "src/server/start.ts")).href)) as typeof import("../../src/server/start.ts");
  const { createLogger } = (await import(pathToFileURL(join(root, "src/util/log.ts")).href)) as typeof import("../../src/util/log.ts");
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: seedDir, listen: "127.0.0.1:0" } });
  config.database.url = databaseUrl;
  const server = await startServer(config, { log: createLogger("error") });
  const rows = databaseUrl
    ? await seedDevices(server.ctx.store, DEVICES, 0x0a0000000000)
    : (await server.embedded!.write((tx) => insertDevices(tx, DEVICES, 0x0a0000000000)), server.embedded!.all<{ id: number; mac_address: string }>("SELECT id, mac_address FROM devices ORDER BY id"));
  const devices = rows.map((d) => ({ mac: d.mac_address, token: server.ctx.tokens.issueDevice(d.mac_address, d.id, 86400) }));
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 86400);
  await server.close();
  return { admin, devices };
}

async function spawnServer(root: string, dataDir: string, databaseUrl: string): Promise<{ child: ChildProcess; url: string }> {
  const probe = ["-r", join(import.meta.dirname, "memory-probe.cjs")];
  const nodeArgs = [...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), ...probe];
  const env: NodeJS.ProcessEnv = { ...unitEnv, ...process.env, LABGATE_CONFIG: join(work, "bench.config.yaml"), MEMORY_PROBE_FILE: probeFile };
  const serve = ["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...(databaseUrl ? ["--database-url", databaseUrl] : [])];
  const [command, ...args] = isExecutable(root)
    ? [...executableCommand(root), ...serve]
    : [process.execPath, ...nodeArgs, "--import", "tsx", join(root, "src/main.ts"), ...serve];
  if (isExecutable(root)) env.NODE_OPTIONS = [process.env.NODE_OPTIONS ?? "", ...nodeArgs].join(" ").trim();
  const child = spawn(command, args, { cwd: isExecutable(root) ? work : root, stdio: ["ignore", "pipe", "inherit"], env });
  return listening(child);
}

function load(spec: LoadSpec): Promise<LoadResult> {
  const file = join(work, "load.json");
  writeFileSync(file, JSON.stringify(spec));
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "loadgen.ts"), file], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  return once(child, "exit").then(([code]) => {
    if (code !== 0) throw new Error(`load generator exited with ${code}`);
    return JSON.parse(out) as LoadResult;
  });
}

async function run(root: string, engine: BenchEngine, seeded: Seeded): Promise<string[]> {
  const { admin, devices, seedDir, databaseUrl } = seeded;
  const dataDir = join(work, "run");
  rmSync(dataDir, { recursive: true, force: true });
  const { cpSync } = await import("node:fs");
  cpSync(seedDir, dataDir, { recursive: true });
  const server = await spawnServer(root, dataDir, databaseUrl);
  const sims: ChildProcess[] = [];
  try {
    await sleep(2000);
    const idle = rssKiB(server.child.pid!);
    const started = performance.now();
    sims.push(...(await simulators(work, server.url, devices.map((d) => d.token), PROCS)));
    const connectS = (performance.now() - started) / 1000;
    await sleep(3000);
    const connected = rssKiB(server.child.pid!);

    const dispatcher = new UndiciAgent({ connections: 64, keepAliveTimeout: 60_000 });
    const trigger = "svc.builtins.trigger_update_check";
    const fanout = async () => {
      const t0 = performance.now();
      const each = await Promise.all(
        devices.map(async (d) => {
          const s = performance.now();
          const res = await request(`${server.url}/api/v2/devices/${d.mac}/action/exec/${trigger}`, { headers: { authorization: `Bearer token=${admin}` }, dispatcher });
          const body = (await res.body.json()) as { status_code?: number };
          if (res.statusCode !== 200 || body.status_code !== 0) throw new Error(`exec on ${d.mac}: ${res.statusCode} ${JSON.stringify(body)}`);
          return performance.now() - s;
        }),
      );
      return { all: performance.now() - t0, each };
    };
    const bulk: number[] = [];
    const bulkRound = async () => {
      const t0 = performance.now();
      const res = await request(`${server.url}/api/v2/devices/action/exec`, {
        method: "POST",
        headers: { authorization: `Bearer token=${admin}`, "content-type": "application/json" },
        body: JSON.stringify({ action_id: trigger, devices: devices.map((d) => d.mac) }),
        dispatcher,
      });
      if (res.statusCode === 404) {
        await res.body.dump();
        return undefined; // a tree without the fan-out route (a baseline)
      }
      const body = (await res.body.json()) as { results: Array<{ status: number; status_code?: number }> };
      const bad = body.results?.filter((r) => r.status !== 200 || r.status_code !== 0) ?? [];
      if (res.statusCode !== 200 || bad.length > 0) throw new Error(`fan-out: ${res.statusCode}, ${bad.length} failed: ${JSON.stringify(bad.slice(0, 3))}`);
      return performance.now() - t0;
    };
    // What the server holds with every device connected, before any fan-out.
    const connectedHeld = await probeMemory(server.child.pid!);
    // First round: every connection asks its device for the action list once (none: no fan-out at all).
    if (EACH_ROUNDS > 0 || (ROUNDS > 0 && (await bulkRound()) === undefined)) await fanout();
    const checks = devices.slice(0, 2000).map((d) => ({ method: "POST" as const, path: "/api/v1/update/check", token: d.token, body: JSON.stringify({ "svc.software.version": "1", "svc.hardware.devtype": "board" }) }));
    const all: number[] = [];
    const each: number[] = [];
    const checking = load({ url: server.url, requests: checks, connections: 10, seconds: CHECKS, warmupSeconds: 1, client: "raw" });
    await sleep(1500);
    for (let r = 0; r < EACH_ROUNDS; r++) {
      const round = await fanout();
      all.push(round.all);
      each.push(...round.each);
    }
    // The server's RSS before the fan-out requests and after each (issue 31: it must not grow round over round).
    // Then what it holds after a full collection: live heap, sql.js's database file and wasm heap.
    const rounds = [rssKiB(server.child.pid!)];
    const held = [await probeMemory(server.child.pid!)];
    const cpu: number[] = [];
    const postgresCpu: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const cpu0 = cpuMs(server.child.pid!);
      const postgres0 = await postgresCpuSeconds();
      const took = await bulkRound();
      if (took === undefined) break;
      cpu.push(cpuMs(server.child.pid!) - cpu0);
      postgresCpu.push(((await postgresCpuSeconds()) - postgres0) * 1000);
      bulk.push(took);
      rounds.push(rssKiB(server.child.pid!));
      held.push(await probeMemory(server.child.pid!));
    }
    const checked = await checking;
    // Settled: SETTLE seconds after the last answer, the update checks over (or, --busy, going on).
    const busy = BUSY ? load({ url: server.url, requests: checks, connections: BUSY_RATE ? 2 : 10, rate: BUSY_RATE || undefined, seconds: SETTLE + 5, warmupSeconds: 0, client: "raw" }) : undefined;
    await sleep(SETTLE * 1000);
    const after = rssKiB(server.child.pid!);
    const settled = await probeMemory(server.child.pid!);
    await busy;
    await dispatcher.close();
    const label = `${root === SERVER ? "this tree" : "baseline"}${isExecutable(root) ? " (executable)" : ""}, ${engine}`;
    const stages = [connectedHeld, ...held, settled];
    const per = (f: (p: Probe) => number) => `${stages.map((p) => mib(f(p))).join(" / ")} MiB`;
    const space = (name: string, key: "size" | "used") => (p: Probe) => p.spaces[name]?.[key] ?? 0;
    return [
      `| ${label} | ${DEVICES} | ${connectS.toFixed(1)} s | ${(idle / 1024).toFixed(1)} MiB | ${(connected / 1024).toFixed(1)} MiB | **${((connected - idle) / DEVICES).toFixed(1)} KiB** | ${(after / 1024).toFixed(1)} MiB |`,
      `| ${label} | ${mib(connectedHeld.rss)} MiB | ${rounds.map((k) => (k / 1024).toFixed(0)).join(" / ")} MiB | ${((after - rounds[0]) / 1024).toFixed(1)} MiB | **${mib(settled.rss - held[0].rss)} MiB** | ${mib(settled.rss - connectedHeld.rss)} MiB |`,
      `| ${label} | ${per((p) => p.heapUsed)} | ${per((p) => p.heapTotal)} | ${per(space("old", "size"))} | ${per(space("large_object", "size"))} | ${per((p) => p.arrayBuffers)} | ${per((p) => p.wasm)} | ${per((p) => p.rss)} |`,
      `| ${label} | ${per((p) => p.resident.v8Pages)} | ${per((p) => p.resident.mallocMain)} | ${per((p) => p.resident.otherAnon)} | ${per((p) => p.resident.file)} |`,
      `| ${label} | ${each.length ? `${pct(each, 0.5).toFixed(0)} ms | ${pct(each, 0.99).toFixed(0)} ms | ${pct(all, 0.5).toFixed(0)} ms | ${Math.max(...all).toFixed(0)} ms` : "- | - | - | -"} | ${bulk.length ? `${pct(bulk, 0.5).toFixed(0)} ms / ${Math.max(...bulk).toFixed(0)} ms | ${pct(cpu, 0.5).toFixed(0)} ms${engine === "postgres" ? ` + ${pct(postgresCpu, 0.5).toFixed(0)} ms PostgreSQL` : ""}` : "- | -"} | ${checked.perSecond.toFixed(0)}/s | ${checked.p50.toFixed(1)} ms | ${checked.p99.toFixed(1)} ms |`,
    ];
  } finally {
    for (const sim of sims) sim.kill("SIGKILL");
    server.child.kill("SIGTERM");
    await once(server.child, "exit");
  }
}

console.log(`labgate device-socket benchmark: ${DEVICES} simulated devices in ${PROCS} processes, ${ROUNDS} fan-out rounds`);
console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
console.log(`server environment from scripts/labgate.service: ${Object.entries(unitEnv).map(([k, v]) => `${k}=${v}`).join(" ") || "none"}`);
writeFileSync(join(work, "bench.config.yaml"), "log_level: warn\n");
interface Seeded {
  admin: string;
  devices: { mac: string; token: string }[];
  seedDir: string;
  databaseUrl: string;
}
const results: string[][] = [];
try {
  for (const engine of benchEngines()) {
    const seedDir = join(work, `seed-${engine}`);
    const databaseUrl = await databaseUrlOf(engine);
    const seeded = { ...(await seed(seedDir, databaseUrl)), seedDir, databaseUrl };
    for (let turn = 0; turn < TURNS; turn++) for (const root of BASELINE ? [BASELINE, SERVER] : [SERVER]) results.push(await run(root, engine, seeded));
  }
} finally {
  await stopBenchPostgres();
}
const table = (i: number) => results.forEach((r) => console.log(r[i]));
console.log("\n| server | sockets | all connected in | RSS idle | RSS connected | per socket | RSS after fan-outs |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
table(0);
console.log(`\nRSS: with every device connected (after a collection), before the measured fan-out requests (one fan-out already made), after each of the ${ROUNDS}; after the last, minus before; after a collection, minus before and minus connected:`);
console.log(`\n| server | connected | before / after each | after the last, minus before | settled, minus before | settled, minus connected |`);
console.log("| --- | ---: | --- | ---: | ---: | ---: |");
table(1);
console.log(`\nAfter a full collection (scripts/bench/memory-probe.cjs): connected / before the fan-out requests / after each / settled:`);
console.log("\n| server | V8 heap, live | V8 heap, kept (capacity) | of which old space | of which large objects | ArrayBuffers (sql.js's database file, socket buffers) | sql.js wasm heap | RSS |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
table(2);
console.log("\nResident memory by mapping, same moments (memory-probe.cjs): V8's heap pages include those it keeps pooled for reuse (Node 24's V8 releases them only in a memory-reducing collection); glibc's main malloc arena; other anonymous memory (other malloc arenas, the wasm heap, large objects, code); file pages:");
console.log("\n| server | V8 heap pages resident | malloc main arena | other anonymous | file pages |");
console.log("| --- | --- | --- | --- | --- |");
table(3);
console.log(`\n| server | one device p50 | one device p99 | all ${DEVICES} back p50 | all back max | one fan-out request: all back p50 / max | server CPU per fan-out request, p50 (update checks meanwhile included) | update checks meanwhile | check p50 | check p99 |`);
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
table(4);
console.log(`load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
rmSync(work, { recursive: true, force: true });
