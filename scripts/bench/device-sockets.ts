/**
 * Benchmark (figures printed, nothing asserted): many connected devices on one server.
 *
 *   node --import tsx scripts/bench/device-sockets.ts [--devices 10000] [--procs 4] [--rounds 3]
 *        [--each-rounds N] [--baseline DIR]
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
 * allow it (this machine: 20,000). `--baseline DIR` runs the same against another checkout.
 * BENCH_NODE_ARGS adds node flags to the server (e.g. --cpu-prof). After each fan-out request the
 * server also reports (memory-probe.cjs) what it holds after a full collection: V8's live heap
 * and the capacity it keeps, ArrayBuffers and the wasm heaps, to tell growth from garbage.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Agent as UndiciAgent, request } from "undici";
import { pathToFileURL } from "node:url";
import type { LoadResult, LoadSpec } from "./loadgen.ts";
import { insertDevices, listening } from "./server.ts";
import { flag } from "./flags.ts";

const DEVICES = flag("devices", 10_000);
const PROCS = flag("procs", 4);
const ROUNDS = flag("rounds", 3);
const EACH_ROUNDS = flag("each-rounds", ROUNDS);
const baselineAt = process.argv.indexOf("--baseline");
const BASELINE = baselineAt >= 0 ? resolve(process.argv[baselineAt + 1]) : undefined;

const here = resolve(import.meta.dirname, "../..");
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-sockets-"));
const seedDir = join(work, "seed");
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const rssKiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const probeFile = join(work, "memory-probe.jsonl");
interface Probe {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  arrayBuffers: number;
  wasm: number;
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
 * Seeds with the baseline's own code when there is one: a newer tree migrates an older data dir
 * at its start, an older one cannot open a newer schema.
 */
async function seed(): Promise<{ admin: string; devices: { mac: string; token: string }[] }> {
  const root = BASELINE ?? here;
  const { loadConfig } = (await import(pathToFileURL(join(root, "src/config/config.ts")).href)) as typeof import("../../src/config/config.ts");
  const { startServer } = (await import(pathToFileURL(join(root, "src/server/start.ts")).href)) as typeof import("../../src/server/start.ts");
  const { createLogger } = (await import(pathToFileURL(join(root, "src/util/log.ts")).href)) as typeof import("../../src/util/log.ts");
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: seedDir, listen: "127.0.0.1:0" } });
  const server = await startServer(config, { log: createLogger("error") });
  await server.ctx.db.write((tx) => insertDevices(tx, DEVICES, 0x0a0000000000));
  const rows = server.ctx.db.all<{ id: number; mac_address: string }>("SELECT id, mac_address FROM devices ORDER BY id");
  const devices = rows.map((d) => ({ mac: d.mac_address, token: server.ctx.tokens.issueDevice(d.mac_address, d.id, 86400) }));
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 86400);
  await server.close();
  return { admin, devices };
}

async function spawnServer(root: string, dataDir: string): Promise<{ child: ChildProcess; url: string }> {
  const probe = ["--expose-gc", "-r", join(import.meta.dirname, "memory-probe.cjs")];
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), ...probe, "--import", "tsx", join(root, "src/main.ts"), "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
    cwd: root,
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, LABGATE_CONFIG: join(work, "bench.config.yaml"), MEMORY_PROBE_FILE: probeFile },
  });
  return listening(child);
}

async function simulators(url: string, tokens: string[]): Promise<ChildProcess[]> {
  const children: ChildProcess[] = [];
  const ready: Promise<void>[] = [];
  const per = Math.ceil(tokens.length / PROCS);
  for (let p = 0; p < PROCS; p++) {
    const file = join(work, `sim-${p}.json`);
    writeFileSync(file, JSON.stringify({ url, prefix: "svc", tokens: tokens.slice(p * per, (p + 1) * per) }));
    const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "device-sim.ts"), file], { stdio: ["ignore", "pipe", "inherit"] });
    children.push(child);
    ready.push(
      new Promise((resolve, reject) => {
        let out = "";
        child.stdout!.on("data", (d) => {
          out += d;
          if (/connected \d+/.test(out)) resolve();
          if (/closed/.test(out)) console.log(`simulator ${p}: ${out.trim().split("\n").at(-1)}`);
        });
        child.once("exit", (code) => reject(new Error(`simulator exited with ${code}`)));
      }),
    );
  }
  await Promise.all(ready);
  return children;
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

async function run(root: string, admin: string, devices: { mac: string; token: string }[]): Promise<string[]> {
  const dataDir = join(work, "run");
  rmSync(dataDir, { recursive: true, force: true });
  const { cpSync } = await import("node:fs");
  cpSync(seedDir, dataDir, { recursive: true });
  const server = await spawnServer(root, dataDir);
  const sims: ChildProcess[] = [];
  try {
    await sleep(2000);
    const idle = rssKiB(server.child.pid!);
    const started = performance.now();
    sims.push(...(await simulators(server.url, devices.map((d) => d.token))));
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
    // First round: every connection asks its device for the action list once.
    if (EACH_ROUNDS > 0 || (await bulkRound()) === undefined) await fanout();
    const checks = devices.slice(0, 2000).map((d) => ({ method: "POST" as const, path: "/api/v1/update/check", token: d.token, body: JSON.stringify({ "svc.software.version": "1", "svc.hardware.devtype": "board" }) }));
    const all: number[] = [];
    const each: number[] = [];
    const checking = load({ url: server.url, requests: checks, connections: 10, seconds: 8 * EACH_ROUNDS + 4 * ROUNDS, warmupSeconds: 1, client: "raw" });
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
    for (let r = 0; r < ROUNDS; r++) {
      const took = await bulkRound();
      if (took === undefined) break;
      bulk.push(took);
      rounds.push(rssKiB(server.child.pid!));
      held.push(await probeMemory(server.child.pid!));
    }
    const checked = await checking;
    // Settled: two seconds after the last answer, the update checks over.
    await sleep(2000);
    const after = rssKiB(server.child.pid!);
    const settled = await probeMemory(server.child.pid!);
    await dispatcher.close();
    const label = root === here ? "this tree" : "baseline";
    return [
      `| ${label} | ${DEVICES} | ${connectS.toFixed(1)} s | ${(idle / 1024).toFixed(1)} MiB | ${(connected / 1024).toFixed(1)} MiB | **${((connected - idle) / DEVICES).toFixed(1)} KiB** | ${(after / 1024).toFixed(1)} MiB |`,
      `| ${label} | ${rounds.map((k) => (k / 1024).toFixed(0)).join(" / ")} MiB | ${((after - rounds[0]) / 1024).toFixed(1)} MiB |`,
      `| ${label} | ${held.map((p) => mib(p.heapUsed)).join(" / ")} MiB | ${held.map((p) => mib(p.heapTotal)).join(" / ")} MiB | ${held.map((p) => mib(p.arrayBuffers)).join(" / ")} MiB | ${held.map((p) => mib(p.wasm)).join(" / ")} MiB | ${mib(settled.rss)} MiB (${mib(settled.rss - held[0].rss)} MiB) |`,
      `| ${label} | ${each.length ? `${pct(each, 0.5).toFixed(0)} ms | ${pct(each, 0.99).toFixed(0)} ms | ${pct(all, 0.5).toFixed(0)} ms | ${Math.max(...all).toFixed(0)} ms` : "- | - | - | -"} | ${bulk.length ? `${pct(bulk, 0.5).toFixed(0)} ms / ${Math.max(...bulk).toFixed(0)} ms` : "-"} | ${checked.perSecond.toFixed(0)}/s | ${checked.p50.toFixed(1)} ms | ${checked.p99.toFixed(1)} ms |`,
    ];
  } finally {
    for (const sim of sims) sim.kill("SIGKILL");
    server.child.kill("SIGTERM");
    await once(server.child, "exit");
  }
}

console.log(`labgate device-socket benchmark: ${DEVICES} simulated devices in ${PROCS} processes, ${ROUNDS} fan-out rounds`);
console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
writeFileSync(join(work, "bench.config.yaml"), "log_level: warn\n");
const { admin, devices } = await seed();
const results: string[][] = [];
for (const root of BASELINE ? [BASELINE, here] : [here]) results.push(await run(root, admin, devices));
console.log("\n| server | sockets | all connected in | RSS idle | RSS connected | per socket | RSS after fan-outs |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const [memory] of results) console.log(memory);
console.log(`\n| server | RSS before the fan-out requests / after each of the ${ROUNDS} | settled after the last, minus before |`);
console.log("| --- | --- | ---: |");
for (const [, rounds] of results) console.log(rounds);
console.log(`\nAfter a full collection (scripts/bench/memory-probe.cjs), before the fan-out requests / after each, then settled:`);
console.log("\n| server | V8 heap, live | V8 heap, kept (capacity) | ArrayBuffers (sql.js's database file, socket buffers) | sql.js wasm heap | RSS settled after a collection (minus before) |");
console.log("| --- | --- | --- | --- | --- | ---: |");
for (const [, , held] of results) console.log(held);
console.log(`\n| server | one device p50 | one device p99 | all ${DEVICES} back p50 | all back max | one fan-out request: all back p50 / max | update checks meanwhile | check p50 | check p99 |`);
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const [, , , fan] of results) console.log(fan);
console.log(`load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
rmSync(work, { recursive: true, force: true });
