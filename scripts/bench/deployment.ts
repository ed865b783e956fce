/**
 * Benchmark (figures printed, nothing asserted): a 3-phase deployment to 10,000 simulated devices.
 *
 *   node --expose-gc --import tsx scripts/bench/deployment.ts [--devices 10000] [--clients 50]
 *        [--seconds 10] [--workers 4] [--engine embedded|postgres|both]
 *
 * Set-up (in-process): N devices in one group, packages v1.5 and v2 (board), the group's policy
 * exact_match,v1.5, a device token each. Memory per device state: the heap and the array buffers
 * (sql.js) before and after creating a deployment of the N devices in-process (with --expose-gc),
 * divided by N; that deployment is aborted again.
 *
 * Then `labgate serve` runs as its own process on that data dir, and:
 * 1. without a deployment: the load generator (loadgen.ts, its own process) runs update checks of
 *    every device for `--seconds`: the rate and p99;
 * 2. a deployment to v2 is created (phases 10, 50, 100 %, next phase at 95 % installed) and the
 *    devices go through it: `--workers` simulated devices at a time take the next device of a
 *    started phase, check for an update (offered v2, with the agent's own HTTP client,
 *    src/update/client/http.ts) and report `update_outcome` installed over its device socket,
 *    phase after phase, until the deployment completes (every device's socket is open from before
 *    step 1 to the end, as a connected agent's is); meanwhile the load generator runs the same
 *    update checks as in 1 for `--seconds`, or until the rollout ends if that is sooner (devices
 *    of started phases get v2 or, once installed, 204; the others v1.5 from the policy);
 * 3. once the deployment completed, 1 again ("without, after": the policy is v2 now, the same
 *    work per check): a machine whose load changed during the run shows as two baselines apart;
 * 4. prints the rates, the ratio to each baseline, the p99s, the load average beside each, and how
 *    long the rollout took, with the server's CPU time per check without a deployment and per
 *    device rolled out once the checks stopped (other load on the machine disturbs these far less
 *    than the rates).
 * 5. prints, per step of the run (the baseline, the creation, each phase with and without the checks,
 *    the completion), the server's CPU time and the longest hold of its event loop (and how many
 *    holds over 5 ms), measured inside the server by loop-probe.ts: figures that a loaded machine
 *    disturbs far less than the rates, and which say where a p99 comes from.
 * BENCH_NODE_ARGS adds node flags to the server (e.g. --cpu-prof). `--engine both` runs it on the
 * embedded engine, then on PostgreSQL (a throwaway cluster on this machine, scripts/bench/engines.ts),
 * whose CPU is printed beside the server's.
 * Targets (issue 26): the rate during the deployment >= 0.8 of the rate without, p99 < 25 ms.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { loadConfig } from "../../src/config/config.ts";
import { httpClient, type HttpClient } from "../../src/update/client/http.ts";
import { startServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import type { LoadRequest, LoadResult, LoadSpec } from "./loadgen.ts";
import { apiAs, listening, runLoad, seedFleet } from "./server.ts";
import { flag } from "./flags.ts";
import type { WindowFigures } from "./loop-probe.ts";
import { benchEngines, databaseUrlOf, postgresCpuSeconds, runPerEngine, stopBenchPostgres } from "./engines.ts";

const DEVICES = flag("devices", 10_000);
const CLIENTS = flag("clients", 50);
const SECONDS = flag("seconds", 10);
const WORKERS = flag("workers", 4);

if (await runPerEngine()) process.exit(0);
const ENGINE = benchEngines()[0];
const DATABASE_URL = await databaseUrlOf(ENGINE);
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-deploy-"));
const dataDir = join(work, "data");

interface Seeded {
  group: number;
  admin: string;
  devices: Array<{ id: number; mac: string; token: string }>;
  memory: { heap: number; buffers: number };
}

const gc = (globalThis as { gc?: () => void }).gc;
function settledMemory(): NodeJS.MemoryUsage {
  gc?.();
  gc?.();
  return process.memoryUsage();
}

async function seed(): Promise<Seeded> {
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir, listen: "127.0.0.1:0" } });
  config.database.url = DATABASE_URL;
  const server = await startServer(config, { log: createLogger("error") });
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 86400);
  const call = apiAs(server.url, admin);
  const { group, rows } = await seedFleet(server, call, DEVICES, 0x030000000000, "exact_match,v1.5");

  // Memory per device state: a deployment of every device, created and aborted in-process (a
  // first one warms the caches and statements up, the second is measured).
  const warm = await call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2" });
  await call("POST", `/api/v2/deployments/${warm.id}/abort`);
  const before = settledMemory();
  const created = await call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2" });
  const afterCreate = settledMemory();
  await call("POST", `/api/v2/deployments/${created.id}/abort`);
  const memory = { heap: (afterCreate.heapUsed - before.heapUsed) / DEVICES, buffers: (afterCreate.arrayBuffers - before.arrayBuffers) / DEVICES };

  const devices = rows.map((r) => ({ id: r.id, mac: r.mac_address, token: server.ctx.tokens.issueDevice(r.mac_address, r.id, 30 * 86400) }));
  await server.close();
  return { group, admin, devices, memory };
}

async function spawnServer(): Promise<{ child: ChildProcess; url: string }> {
  writeFileSync(join(work, "bench.config.yaml"), "log_level: warn\n");
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), "--import", "tsx", "--import", "./scripts/bench/loop-probe.ts", "src/main.ts", "serve", "--config", join(work, "bench.config.yaml"), "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...(DATABASE_URL ? ["--database-url", DATABASE_URL] : [])], {
    stdio: ["ignore", "pipe", "inherit", "ipc"],
    env: { ...process.env, LABGATE_CONFIG: "" },
  });
  return listening(child);
}

/**
 * The server's steps, one window each (loop-probe.ts): `mark(next)` ends the current window and
 * begins `next`, in the order called; `devices` is how many devices the rollout had taken through
 * when it was called.
 */
function stepWindows(child: ChildProcess) {
  const ended: Array<WindowFigures & { devices: number }> = [];
  let queue = Promise.resolve();
  let devicesBefore = 0;
  const mark = (next: string, devices?: number): Promise<void> => {
    queue = queue.then(
      () =>
        new Promise<void>((resolve) => {
          child.once("message", (figures: WindowFigures) => {
            const now = devices ?? devicesBefore;
            ended.push({ ...figures, devices: now - devicesBefore });
            devicesBefore = now;
            resolve();
          });
          child.send({ window: next });
        }),
    );
    return queue;
  };
  return { mark, ended };
}

function printWindows(windows: ReadonlyArray<WindowFigures & { devices: number }>): void {
  console.log(`\nserver, per step (loop-probe.ts; a hold: the time between two turns of a 1 ms timer of the server's loop, wall and the server's CPU in it):`);
  console.log(`  ${"step".padEnd(36)} ${"wall".padStart(7)} ${"CPU".padStart(9)} ${"devices".padStart(7)} ${"CPU/device".padStart(10)} ${"longest hold wall / CPU".padStart(24)} ${"CPU holds > 5 ms".padStart(18)}`);
  for (const w of windows) {
    const perDevice = w.devices > 0 ? `${(w.cpuMs / w.devices).toFixed(2)} ms` : "";
    console.log(
      `  ${w.window.padEnd(36)} ${`${(w.wallMs / 1000).toFixed(1)} s`.padStart(7)} ${`${w.cpuMs.toFixed(0)} ms`.padStart(9)} ${String(w.devices || "").padStart(7)} ${perDevice.padStart(10)} ${`${w.maxHoldMs.toFixed(1)} / ${w.maxCpuHoldMs.toFixed(1)} ms`.padStart(24)} ${`${w.longHolds} (${w.longHoldMs.toFixed(0)} ms)`.padStart(18)}`,
    );
  }
}

const load = (spec: LoadSpec, stop?: AbortSignal): Promise<LoadResult> => runLoad(work, spec, stop);
const loadNow = () => loadavg()[0].toFixed(2);

/** CPU seconds (user + system) a process has used so far, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

const body = (mac: string, version: string) => JSON.stringify({ "svc.software.version": version, "svc.hardware.devtype": "board", "svc.hardware.macaddr": mac });

/** A simulated agent's socket, open for the whole run as a real agent keeps it: outcomes go over it. */
interface AgentSocket {
  ws: WebSocket;
  /** Resolvers of outcomes sent and not yet acknowledged, by message id. */
  acks: Map<string, () => void>;
}

async function connect(url: string, device: { mac: string; token: string }): Promise<AgentSocket> {
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${device.token}` }, perMessageDeflate: false });
  const acks = new Map<string, () => void>();
  ws.on("message", (data) => {
    const message = JSON.parse(String(data)) as { method: string; id?: string };
    if (message.method === "update_outcome_ack" && message.id) acks.get(message.id)?.();
  });
  await new Promise<void>((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  return { ws, acks };
}

/** Every device's socket, a batch at a time (the server's handshake rate, not the benchmark's subject). */
async function connectAll(url: string, devices: Array<{ mac: string; token: string }>): Promise<Map<string, AgentSocket>> {
  const sockets = new Map<string, AgentSocket>();
  const queue = [...devices];
  await Promise.all(Array.from({ length: 100 }, async () => {
    for (let next = queue.shift(); next; next = queue.shift()) sockets.set(next.mac, await connect(url, next));
  }));
  return sockets;
}

/** One simulated device through the deployment: its check (offered v2), then `installed` over its open socket. */
async function rollOne(http: HttpClient, url: string, device: { mac: string; token: string }, socket: AgentSocket): Promise<void> {
  const res = await http(`${url}/api/v1/update/check`, { method: "POST", headers: { authorization: `Bearer token=${device.token}`, "content-type": "application/json" }, body: body(device.mac, "v1") });
  const offer = res.status === 200 ? ((await res.json()) as { version: string }) : (res.discard(), undefined);
  if (offer?.version !== "v2") return;
  const id = `b-${device.mac}`;
  await new Promise<void>((resolve) => {
    socket.acks.set(id, resolve);
    socket.ws.send(JSON.stringify({ method: "update_outcome", id, state: "installed", version: "v2", from_version: "v1" }));
  });
  socket.acks.delete(id);
}

const fmt = (r: LoadResult) =>
  `${r.perSecond.toFixed(0).padStart(7)} checks/s  p50 ${r.p50.toFixed(2).padStart(6)} ms  p99 ${r.p99.toFixed(2).padStart(6)} ms  ` +
  `(${r.requests} requests; ${Object.entries(r.statuses).map(([s, n]) => `${s}: ${n}`).join(", ")}${r.errors ? `; ${r.errors} errors` : ""})`;

async function main(): Promise<void> {
  console.log(`labgate deployment benchmark (${ENGINE} engine): ${DEVICES} devices, 3 phases, ${CLIENTS} check clients, ${WORKERS} rollout workers, ${SECONDS} s of checks each`);
  console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
  if (!gc) console.log("(run with node --expose-gc for the memory figures)");
  const seeded = await seed();
  console.log(`memory per device state (in-process, a deployment of ${DEVICES}): heap ${seeded.memory.heap.toFixed(0)} B, sql.js buffers ${seeded.memory.buffers.toFixed(0)} B`);

  const server = await spawnServer();
  const api = async <T>(method: string, path: string, json?: unknown): Promise<T> => {
    const res = await fetch(server.url + path, { method, headers: { authorization: `Bearer token=${seeded.admin}`, "content-type": "application/json" }, body: json === undefined ? undefined : JSON.stringify(json) });
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<T>;
  };
  let sockets = new Map<string, AgentSocket>();
  const checks: LoadRequest[] = seeded.devices.map((d) => ({ method: "POST", path: "/api/v1/update/check", token: d.token, body: body(d.mac, "v1") }));
  try {
    // The fleet is connected throughout, as agents are: both rates are measured with every socket open.
    const connectStarted = performance.now();
    sockets = await connectAll(server.url, seeded.devices);
    console.log(`${sockets.size} device sockets open in ${((performance.now() - connectStarted) / 1000).toFixed(1)} s`);
    // Warm-up: JIT, caches, and every device's first check (which writes its progress record).
    const steps = stepWindows(server.child);
    await steps.mark("checks without a deployment");
    const cpuWithout = cpuSeconds(server.child.pid!);
    const without = await load({ url: server.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: Math.max(3, DEVICES / 1000), client: "raw" });
    // The generator's warm-up and start count too: an upper bound, as in update-check.ts.
    const perCheckWithout = (cpuSeconds(server.child.pid!) - cpuWithout) / without.requests;
    console.log(`\nwithout a deployment  ${fmt(without)}  load ${loadNow()}`);

    await steps.mark("creation (POST, 10,000 members)".replace("10,000", DEVICES.toLocaleString("en")));
    const rssBefore = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server.child.pid}/status`, "utf8"))![1]) * 1024;
    const created = await api<{ id: number }>("POST", "/api/v2/deployments", { group: seeded.group, version: "v2", phases: [10, 50, 100], success_percent: 95 });
    const rssAfter = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server.child.pid}/status`, "utf8"))![1]) * 1024;
    await steps.mark("the benchmark lists the members");
    const order = (await Promise.all(Array.from({ length: Math.ceil(DEVICES / 1000) }, (_, i) => api<Array<{ device: number; phase: number }>>("GET", `/api/v2/deployments/${created.id}/devices?limit=1000&offset=${i * 1000}`)))).flat();
    const byId = new Map(seeded.devices.map((d) => [d.id, d]));
    const started = performance.now();
    const http = httpClient();
    let rolled = 0;
    let checking = true;
    let rolling = -1;
    const rollout = (async () => {
      for (let phase = 0; phase < 3; phase++) {
        for (;;) {
          const view = await api<{ current_phase: number; status: string }>("GET", `/api/v2/deployments/${created.id}`);
          if (view.current_phase >= phase || view.status === "completed") break;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        rolling = phase;
        void steps.mark(`phase ${phase + 1}${checking ? ", checks running" : ""}`, rolled);
        const queue = order.filter((m) => m.phase === phase).map((m) => byId.get(m.device)!);
        await Promise.all(Array.from({ length: WORKERS }, async () => {
          for (let next = queue.shift(); next; next = queue.shift()) {
            await rollOne(http, server.url, next, sockets.get(next.mac)!);
            rolled += 1;
          }
        }));
      }
    })();
    // The checks during the deployment end with the rollout when it is shorter than --seconds.
    const rolledOut = new AbortController();
    void rollout.finally(() => rolledOut.abort());
    const cpuDuring = cpuSeconds(server.child.pid!);
    const during = await load({ url: server.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: 1, client: "raw" }, rolledOut.signal);
    const loadDuring = loadNow();
    checking = false;
    void steps.mark(`phase ${rolling + 1}, after the checks`, rolled);
    const afterChecks = { cpu: cpuSeconds(server.child.pid!), postgres: await postgresCpuSeconds(), rolled };
    const perCheckDuring = (afterChecks.cpu - cpuDuring) / during.requests;
    await rollout;
    await steps.mark("completion (after the last outcome)", rolled);
    const rolledAlone = rolled - afterChecks.rolled;
    const perDevice = rolledAlone > 0 ? (cpuSeconds(server.child.pid!) - afterChecks.cpu) / rolledAlone : NaN;
    const postgresPerDevice = rolledAlone > 0 ? ((await postgresCpuSeconds()) - afterChecks.postgres) / rolledAlone : NaN;
    let final: { status: string; counts: Record<string, number> };
    for (;;) {
      final = await api("GET", `/api/v2/deployments/${created.id}`);
      if (final.status === "completed") break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const took = (performance.now() - started) / 1000;
    const group = await api<{ policy: string }>("GET", `/api/v2/groups/${seeded.group}`);
    await steps.mark("checks without, after");
    const after = await load({ url: server.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: Math.max(3, DEVICES / 1000), client: "raw" });
    console.log(`during the deployment  ${fmt(during)}  load ${loadDuring}${during.seconds < SECONDS - 0.5 ? ` (${during.seconds.toFixed(1)} s: the rollout ended)` : ""}`);
    console.log(`without, after         ${fmt(after)}  load ${loadNow()}`);
    const ratio = (base: LoadResult) => (during.perSecond / base.perSecond).toFixed(3);
    console.log(`ratio during/without   ${ratio(without)} (${ratio(after)} to the baseline after; the baselines ${((100 * Math.abs(after.perSecond - without.perSecond)) / without.perSecond).toFixed(0)} % apart)  (targets: >= 0.8, p99 < 25 ms)`);
    console.log(`\nrollout: ${final.status} in ${took.toFixed(1)} s (${(DEVICES / took).toFixed(0)} devices/s through check + outcome); installed ${final.counts.installed}; group policy now ${group.policy}`);
    console.log(`server CPU: ${(perCheckWithout * 1e6).toFixed(0)} us per check without a deployment, ${(perCheckDuring * 1e6).toFixed(0)} us during it (the rollout's ${afterChecks.rolled} devices included); ${(perDevice * 1e3).toFixed(2)} ms per device rolled out after the checks (${rolledAlone} devices)${DATABASE_URL ? `, PostgreSQL ${(postgresPerDevice * 1e3).toFixed(2)} ms more` : ""}`);
    await steps.mark("end");
    printWindows(steps.ended.filter((w) => w.window !== "start"));
    console.log(`server RSS: +${((rssAfter - rssBefore) / DEVICES).toFixed(0)} B per device at creation (RSS, noisy)`);
  } finally {
    for (const { ws } of sockets.values()) ws.terminate();
    server.child.kill("SIGTERM");
    await once(server.child, "exit");
    rmSync(work, { recursive: true, force: true });
    await stopBenchPostgres();
  }
}

await main();
