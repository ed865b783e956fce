/**
 * Benchmark (figures printed, nothing asserted): update checks per second and latency
 * percentiles against a real `labgate serve` process, next to a bare Hono route measured with
 * the same load generator in the same run.
 *
 *   node --import tsx scripts/bench/update-check.ts [--devices 10000] [--groups 100]
 *        [--packages 500] [--clients 50] [--seconds 10]
 *
 * Set-up (in-process, then the server is restarted as its own process): N devices (rows and
 * device tokens minted with the appliance key), G groups with an exact_match policy and
 * P/G packages each (a chain of requires: deltas plus a full image), every device in one group.
 * Targets (issue 4): >= 8,000 checks/s, p99 < 25 ms on 2 cores, ratio to the bare route >= 0.12.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { Agent, request } from "node:http";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfig } from "../../src/config/config.ts";
import { startServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";

const flag = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const DEVICES = flag("devices", 10_000);
const GROUPS = flag("groups", 100);
const PACKAGES = flag("packages", 500);
const CLIENTS = flag("clients", 50);
const SECONDS = flag("seconds", 10);
const PER_GROUP = Math.max(1, Math.floor(PACKAGES / GROUPS));

const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-check-"));
const dataDir = join(work, "data");

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

  const now = new Date().toISOString();
  const macs: string[] = [];
  await server.ctx.db.write((tx) => {
    for (let i = 0; i < DEVICES; i++) {
      const mac = (0x020000000000 + i).toString(16).padStart(12, "0").match(/../g)!.join(":");
      macs.push(mac);
      tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata) VALUES (?, ?, ?, '{}', '{}')", [now, mac, mac]);
    }
  });
  const deviceIds = server.ctx.db.all<{ id: number; mac_address: string }>("SELECT id, mac_address FROM devices ORDER BY id");

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
        token: server.ctx.tokens.issueDevice(device.mac_address, device.id, 3600),
        body: JSON.stringify({ "svc.software.version": `g${g}-v${start}`, "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.mac_address }),
      });
    }
  }
  await server.close();
  return targets;
}

async function spawnServer(args: string[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), "--import", "tsx", ...args], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, LABGATE_CONFIG: "" } });
  let out = "";
  for await (const chunk of child.stdout!) {
    out += chunk;
    const match = /listening on (\S+)/.exec(out);
    if (match) return { child, url: match[1] };
  }
  throw new Error(`server did not start: ${out}`);
}

interface Result {
  requests: number;
  perSecond: number;
  p50: number;
  p99: number;
  statuses: Map<number, number>;
}

/** CLIENTS keep-alive connections, each sending its next request as soon as the last answered. */
async function load(url: string, path: string, next: () => { token?: string; body?: string }, seconds: number): Promise<Result> {
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  const { hostname, port } = new URL(url);
  const latencies: number[] = [];
  const statuses = new Map<number, number>();
  const deadline = performance.now() + seconds * 1000;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const { token, body } = next();
      const started = performance.now();
      const req = request(
        {
          agent,
          hostname,
          port,
          path,
          method: body ? "POST" : "GET",
          headers: { ...(token ? { authorization: `Bearer token=${token}` } : {}), ...(body ? { "content-type": "application/json", "content-length": Buffer.byteLength(body) } : {}) },
        },
        (res) => {
          res.resume();
          res.on("end", () => {
            latencies.push(performance.now() - started);
            statuses.set(res.statusCode!, (statuses.get(res.statusCode!) ?? 0) + 1);
            resolve();
          });
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  const worker = async () => {
    while (performance.now() < deadline) await one();
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: CLIENTS }, worker));
  const elapsed = (performance.now() - started) / 1000;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))];
  return { requests: latencies.length, perSecond: latencies.length / elapsed, p50: pct(0.5), p99: pct(0.99), statuses };
}

const fmt = (r: Result) =>
  `${r.perSecond.toFixed(0).padStart(7)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  (${r.requests} requests; ${[...r.statuses].map(([s, n]) => `${s}: ${n}`).join(", ")})`;

async function main(): Promise<void> {
  console.log(`labgate update-check benchmark: ${DEVICES} devices, ${GROUPS} groups, ${PER_GROUP * GROUPS} packages, ${CLIENTS} clients, ${SECONDS} s`);
  const targets = await seed();
  let i = 0;
  const nextCheck = () => targets[i++ % targets.length];

  // Per-request log lines at info would measure stderr, not the server.
  writeFileSync(join(work, "bench.config.yaml"), "log_level: warn\n");
  const labgate = await spawnServer(["src/main.ts", "serve", "--config", join(work, "bench.config.yaml"), "--data-dir", dataDir, "--listen", "127.0.0.1:0"]);
  let checks: Result;
  try {
    // Warm-up: JIT, caches, and every device's first check (which writes its progress record).
    await load(labgate.url, "/api/v1/update/check", nextCheck, Math.max(2, targets.length / 2000));
    checks = await load(labgate.url, "/api/v1/update/check", nextCheck, SECONDS);
  } finally {
    labgate.child.kill("SIGTERM");
    await once(labgate.child, "exit");
  }

  const bare = await spawnServer([
    "--input-type=module",
    "-e",
    `import { Hono } from "hono"; import { serve } from "@hono/node-server";
     const app = new Hono().get("/bare", (c) => c.json({ ok: true }));
     const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info) => console.log("listening on http://127.0.0.1:" + info.port));`,
  ]);
  let baseline: Result;
  try {
    await load(bare.url, "/bare", () => ({}), 2);
    baseline = await load(bare.url, "/bare", () => ({}), SECONDS);
  } finally {
    bare.child.kill("SIGTERM");
    await once(bare.child, "exit");
  }

  console.log(`update check   ${fmt(checks)}`);
  console.log(`bare Hono GET  ${fmt(baseline)}`);
  console.log(`ratio          ${(checks.perSecond / baseline.perSecond).toFixed(3)}  (targets: >= 8000 checks/s, p99 < 25 ms, ratio >= 0.12)`);
  rmSync(work, { recursive: true, force: true });
}

await main();
