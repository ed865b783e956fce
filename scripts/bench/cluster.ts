/**
 * Benchmark (figures printed, nothing asserted): two nodes of a cluster on one PostgreSQL, with
 * simulated devices spread over them (device-sim.ts, the WebSocket protocol only).
 *
 *   node --import tsx scripts/bench/cluster.ts [--devices 20000] [--rounds 3] [--checks 10] [--procs 2]
 *
 * Seeds N devices in a throwaway PostgreSQL (scripts/bench/engines.ts), then, in the same run:
 * 1. one node alone with N/2 devices connected (each node's share below): one fan-out request
 *    (`POST /api/v2/devices/action/exec`, the built-in update-check action) to its N/2 devices
 *    `--rounds` times, then update checks against it for `--checks` seconds;
 * 2. two nodes, N/2 devices on each: one fan-out request to all N from node 1 (half of them relayed
 *    to node 2) `--rounds` times, then update checks spread over both nodes at once.
 * For each it prints the fan-out's time (all back), the checks' rate, p50 and p99 per node, and the
 * CPU each node and PostgreSQL used per check (the processes' /proc times over the measured
 * seconds, divided by the checks answered). `--procs` simulator processes per node (each holds
 * its sockets' descriptors: `ulimit -n` bounds one process, 20,000 on this machine, which is why
 * one node never holds all N here). The load average is printed before and after: on a shared
 * machine compare CPU per check, not rates.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Agent as UndiciAgent, request } from "undici";
import { freePort } from "../../test/helpers/cluster.ts";
import { benchDatabase, postgresCpuSeconds, seedDevices, stopBenchPostgres } from "./engines.ts";
import { flag } from "./flags.ts";
import type { LoadResult } from "./loadgen.ts";
import { listening, runLoad, simulators } from "./server.ts";

const DEVICES = flag("devices", 20_000);
const ROUNDS = flag("rounds", 3);
const CHECK_SECONDS = flag("checks", 10);
const PROCS = flag("procs", 2);
const here = resolve(import.meta.dirname, "../..");
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-cluster-"));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load = () => loadavg().map((l) => l.toFixed(1)).join(" ");
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
/** CPU ms (user + system) a process has used (clock ticks of 10 ms). */
const cpuMs = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
};

interface Seeded {
  url: string;
  seedDir: string;
  admin: string;
  devices: Array<{ mac: string; token: string }>;
}

async function seed(): Promise<Seeded> {
  const url = await benchDatabase();
  const seedDir = join(work, "seed");
  const { loadConfig } = await import("../../src/config/config.ts");
  const { startServer } = await import("../../src/server/start.ts");
  const { createLogger } = await import("../../src/util/log.ts");
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: seedDir, listen: "127.0.0.1:0" } });
  config.database.url = url;
  const server = await startServer(config, { log: createLogger("error") });
  const rows = await seedDevices(server.ctx.store, DEVICES, 0x0a0000000000);
  const devices = rows.map((d) => ({ mac: d.mac_address, token: server.ctx.tokens.issueDevice(d.mac_address, d.id, 86400) }));
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 86400);
  await server.close();
  return { url, seedDir, admin, devices };
}

interface Node {
  name: string;
  child: ChildProcess;
  url: string;
}

/** `labgate serve` as node `name` of the cluster on `seeded`'s database, with the seed's keys. */
async function startNode(seeded: Seeded, name: string): Promise<Node> {
  const dataDir = join(work, name);
  rmSync(dataDir, { recursive: true, force: true });
  cpSync(seeded.seedDir, dataDir, { recursive: true });
  const port = await freePort();
  const configFile = join(work, `${name}.yaml`);
  writeFileSync(configFile, ["log_level: warn", `cluster: {node_name: ${name}, advertise_url: "http://127.0.0.1:${port}"}`, ""].join("\n"));
  const child = spawn(process.execPath, ["--import", "tsx", join(here, "src/main.ts"), "serve", "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`, "--database-url", seeded.url], {
    cwd: here,
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, LABGATE_CONFIG: configFile },
  });
  const { url } = await listening(child);
  return { name, child, url };
}

async function stopNode(node: Node): Promise<void> {
  node.child.kill("SIGTERM");
  await once(node.child, "exit");
}

/** Waits until `node` counts `count` devices connected over the cluster (GET /api/v1/cluster). */
async function untilConnected(node: Node, admin: string, count: number): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const res = await request(`${node.url}/api/v1/cluster`, { headers: { authorization: `Bearer token=${admin}` } });
    const body = (await res.body.json()) as { nodes?: Array<{ state: string; connected_devices: number }>; error?: string };
    if (!body.nodes) {
      console.log(`${node.name}: GET /api/v1/cluster answered ${res.statusCode} ${body.error ?? ""}`);
      await sleep(1000);
      continue;
    }
    const seen = body.nodes.filter((n) => n.state === "up").reduce((sum, n) => sum + n.connected_devices, 0);
    if (seen >= count) return;
    await sleep(500);
  }
  throw new Error(`${node.name} did not see ${count} devices connected`);
}

/** One fan-out request from `node` to `macs`: its time (all back), and the CPU of each node over it. */
async function fanOut(node: Node, admin: string, macs: string[], nodes: Node[], dispatcher: UndiciAgent): Promise<{ ms: number; cpu: number[]; postgres: number }> {
  const cpu0 = nodes.map((n) => cpuMs(n.child.pid!));
  const postgres0 = await postgresCpuSeconds();
  const t0 = performance.now();
  const res = await request(`${node.url}/api/v2/devices/action/exec`, {
    method: "POST",
    headers: { authorization: `Bearer token=${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ action_id: "svc.builtins.trigger_update_check", devices: macs }),
    dispatcher,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  const body = (await res.body.json()) as { results: Array<{ status: number; status_code?: number }> };
  const ms = performance.now() - t0;
  const bad = body.results?.filter((r) => r.status !== 200 || r.status_code !== 0) ?? [];
  if (res.statusCode !== 200 || bad.length > 0) throw new Error(`fan-out: ${res.statusCode}, ${bad.length} failed: ${JSON.stringify(bad.slice(0, 3))}`);
  return { ms, cpu: nodes.map((n, i) => cpuMs(n.child.pid!) - cpu0[i]), postgres: ((await postgresCpuSeconds()) - postgres0) * 1000 };
}

/** Update checks against every node at once for CHECK_SECONDS (after a warm-up): per node its load result and CPU per check, and PostgreSQL's per check. */
async function checks(nodes: Node[], devices: Seeded["devices"]): Promise<{ results: LoadResult[]; cpuPerCheck: number[]; postgresPerCheck: number }> {
  const requestsFor = (i: number) =>
    devices
      .filter((_, d) => d % nodes.length === i)
      .slice(0, 2000)
      .map((d) => ({ method: "POST" as const, path: "/api/v1/update/check", token: d.token, body: JSON.stringify({ "svc.software.version": "1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": d.mac }) }));
  const spec = (node: Node, i: number, seconds: number) => ({ url: node.url, requests: requestsFor(i), connections: 8, seconds, warmupSeconds: 0, client: "raw" as const });
  await Promise.all(nodes.map((node, i) => runLoad(work, spec(node, i, 2), undefined, node.name)));
  const cpu0 = nodes.map((n) => cpuMs(n.child.pid!));
  const postgres0 = await postgresCpuSeconds();
  const results = await Promise.all(nodes.map((node, i) => runLoad(work, spec(node, i, CHECK_SECONDS), undefined, node.name)));
  const cpu = nodes.map((n, i) => cpuMs(n.child.pid!) - cpu0[i]);
  const postgres = ((await postgresCpuSeconds()) - postgres0) * 1000;
  const total = results.reduce((sum, r) => sum + r.requests, 0);
  return { results, cpuPerCheck: cpu.map((ms, i) => (ms * 1000) / results[i].requests), postgresPerCheck: (postgres * 1000) / total };
}

interface Phase {
  label: string;
  fanOuts: Array<{ ms: number; cpu: number[]; postgres: number }>;
  devices: number;
  checks: Awaited<ReturnType<typeof checks>>;
  nodes: string[];
  loadBefore: string;
  loadAfter: string;
}

async function phase(seeded: Seeded, names: string[]): Promise<Phase> {
  const loadBefore = load();
  const nodes: Node[] = [];
  const sims: ChildProcess[] = [];
  const dispatcher = new UndiciAgent({ connections: 4, keepAliveTimeout: 60_000 });
  try {
    for (const name of names) nodes.push(await startNode(seeded, name));
    const share = Math.floor(DEVICES / 2);
    const placed = nodes.map((_, i) => seeded.devices.slice(i * share, (i + 1) * share));
    for (const [i, node] of nodes.entries()) sims.push(...(await simulators(work, node.url, placed[i].map((d) => d.token), PROCS, node.name)));
    const macs = placed.flat().map((d) => d.mac);
    await untilConnected(nodes[0], seeded.admin, macs.length);
    await sleep(2000);
    // The first fan-out asks every device for its action list once: not measured.
    await fanOut(nodes[0], seeded.admin, macs, nodes, dispatcher);
    const fanOuts = [];
    for (let r = 0; r < ROUNDS; r++) fanOuts.push(await fanOut(nodes[0], seeded.admin, macs, nodes, dispatcher));
    const checked = await checks(nodes, seeded.devices);
    return { label: names.length === 1 ? "one node" : `${names.length} nodes`, fanOuts, devices: macs.length, checks: checked, nodes: names, loadBefore, loadAfter: load() };
  } finally {
    await dispatcher.close();
    for (const sim of sims) sim.kill("SIGKILL");
    for (const node of nodes) await stopNode(node);
  }
}

console.log(`labgate cluster benchmark: ${DEVICES} simulated devices over two nodes on one PostgreSQL, ${ROUNDS} fan-out rounds, ${CHECK_SECONDS} s of update checks`);
console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${load()}; ${new Date().toISOString()}`);
const phases: Phase[] = [];
try {
  const seeded = await seed();
  for (const names of [["node-1"], ["node-1", "node-2"]]) {
    phases.push(await phase(seeded, names));
    console.log(`measured: ${JSON.stringify(phases.at(-1))}`);
  }
} finally {
  await stopBenchPostgres();
  rmSync(work, { recursive: true, force: true });
}
console.log("\n| setup | devices | one fan-out from node-1, all back: p50 / max | node CPU per fan-out (p50, each node) | PostgreSQL CPU per fan-out | load average before / after |");
console.log("| --- | ---: | ---: | --- | ---: | --- |");
for (const p of phases) {
  const cpu = p.nodes.map((name, i) => `${name} ${pct(p.fanOuts.map((f) => f.cpu[i]), 0.5).toFixed(0)} ms`).join(", ");
  console.log(`| ${p.label} | ${p.devices} | ${pct(p.fanOuts.map((f) => f.ms), 0.5).toFixed(0)} / ${Math.max(...p.fanOuts.map((f) => f.ms)).toFixed(0)} ms | ${cpu} | ${pct(p.fanOuts.map((f) => f.postgres), 0.5).toFixed(0)} ms | ${p.loadBefore} / ${p.loadAfter} |`);
}
console.log("\n| setup | node | checks/s | p50 | p99 | node CPU per check | PostgreSQL CPU per check (all nodes) | answers |");
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const p of phases) {
  p.nodes.forEach((name, i) => {
    const r = p.checks.results[i];
    console.log(`| ${p.label} | ${name} | ${r.perSecond.toFixed(0)} | ${r.p50.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${p.checks.cpuPerCheck[i].toFixed(0)} us | ${p.checks.postgresPerCheck.toFixed(0)} us | ${Object.entries(r.statuses).map(([status, n]) => `${status}: ${n}`).join(", ")}${r.errors ? `; ${r.errors} errors` : ""} |`);
  });
  const total = p.checks.results.reduce((sum, r) => sum + r.perSecond, 0);
  if (p.nodes.length > 1) console.log(`| ${p.label} | together | ${total.toFixed(0)} | | | | | |`);
}
console.log(`load average at the end ${load()}`);
