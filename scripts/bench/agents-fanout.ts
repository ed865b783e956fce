// N agents (in-process, the real Agent class) connected at once to a `labgate serve` child process:
// the server's memory per connected device, and the fan-out latency of an action sent to all of
// them at once (HTTP exec -> WebSocket -> agent -> result -> HTTP answer), p50/p99.
// Usage: npm run bench:agents [-- AGENTS ROUNDS]   e.g. npm run bench:agents -- 100 20
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent } from "../../src/agent/agent.ts";
import { buildAgentConfig } from "../../src/agent/config.ts";
import { createLogger } from "../../src/util/log.ts";

const AGENTS = Number(process.argv[2]) || 100;
const ROUNDS = Number(process.argv[3]) || 20;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const fmt = (n: number) => n.toFixed(1);
const rssKiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(join(tmpdir(), "labgate-bench-agents-"));
const serverDir = join(dir, "server");
writeFileSync(join(dir, "server.yaml"), "log_level: warn\n");
const server = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "serve", "--config", join(dir, "server.yaml"), "--data-dir", serverDir, "--listen", "127.0.0.1:0"], {
  stdio: ["ignore", "pipe", "inherit"],
  env: { ...process.env, LABGATE_CONFIG: "" },
});
const url = await new Promise<string>((resolve, reject) => {
  let out = "";
  server.stdout!.on("data", (chunk) => {
    out += chunk;
    const match = /labgate listening on (\S+)/.exec(out);
    if (match) resolve(match[1]);
  });
  server.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
});
const token = readFileSync(join(serverDir, "admin.token"), "utf8").trim();
const api = async (path: string, init: RequestInit & { json?: unknown } = {}) => {
  const headers: Record<string, string> = { authorization: `Bearer token=${token}` };
  if (init.json !== undefined) headers["content-type"] = "application/json";
  return fetch(url + path, { ...init, headers, body: init.json === undefined ? undefined : JSON.stringify(init.json) });
};

const agents: Agent[] = [];
try {
  await sleep(500);
  const idle = rssKiB(server.pid!);
  const quiet = createLogger("error");
  for (let i = 0; i < AGENTS; i++) {
    const mac = `0b:00:00:00:${(i >> 8).toString(16).padStart(2, "0")}:${(i & 255).toString(16).padStart(2, "0")}`;
    mkdirSync(join(dir, `agent-${i}`, "files"), { recursive: true });
    const config = buildAgentConfig({
      server: url,
      data_dir: join(dir, `agent-${i}`),
      key_type: "ed25519",
      mac_address: mac,
      file_base_dir: join(dir, `agent-${i}`, "files"),
      update_check_interval: 3600,
      retry_min_delay: 0.2,
      retry_max_delay: 1,
      log_level: "error",
      actions: [{ id: "noop", name: "No-op", command: ["true"], timeout: 10 }],
    });
    const agent = new Agent(config, quiet);
    agent.start();
    agents.push(agent);
  }
  // Approve everyone (the registrations arrive over the first second or so).
  const approved = new Set<string>();
  while (approved.size < AGENTS) {
    const pending = (await (await api("/api/v1/auth/pending")).json()) as Array<{ mac_address: string; public_key: string }>;
    for (const p of pending) {
      if (approved.has(p.mac_address)) continue;
      const res = await api("/api/v1/auth/register", { method: "POST", json: { mac_address: p.mac_address, public_key: p.public_key } });
      if (res.status === 200) approved.add(p.mac_address);
    }
    await sleep(100);
  }
  const connectStarted = performance.now();
  for (;;) {
    const devices = (await (await api("/api/v2/devices")).json()) as Array<{ connected: boolean; capabilities: Record<string, unknown> }>;
    if (devices.filter((d) => d.connected && d.capabilities.exec_cmds).length === AGENTS) break;
    await sleep(100);
  }
  const connectMs = performance.now() - connectStarted;
  await sleep(1000);
  const connected = rssKiB(server.pid!);

  // Warm-up round (action lists get cached per connection), then measured rounds.
  const fanout = async (action: string) => {
    const started = performance.now();
    const each = await Promise.all(
      agents.map(async (agent) => {
        const t0 = performance.now();
        const res = await api(`/api/v2/devices/${agent.mac}/action/exec/${action}`);
        const body = (await res.json()) as { status_code?: number };
        if (res.status !== 200 || body.status_code !== 0) throw new Error(`exec on ${agent.mac}: ${res.status} ${JSON.stringify(body)}`);
        return performance.now() - t0;
      }),
    );
    return { all: performance.now() - started, each };
  };
  const results: Record<string, { all: number[]; each: number[] }> = {};
  for (const action of ["svc.builtins.trigger_update_check", "noop"]) {
    await fanout(action);
    results[action] = { all: [], each: [] };
    for (let r = 0; r < ROUNDS; r++) {
      const { all, each } = await fanout(action);
      results[action].all.push(all);
      results[action].each.push(...each);
    }
  }
  const peak = rssKiB(server.pid!);

  console.log(`node ${process.version}; ${AGENTS} agents in one process, server = labgate serve (child process); ${ROUNDS} rounds per action`);
  console.log(`all ${AGENTS} connected ${fmt(connectMs / 1000)} s after the last approval`);
  console.log("");
  console.log("| server RSS | MiB |");
  console.log("| --- | ---: |");
  console.log(`| idle, no device | ${fmt(idle / 1024)} |`);
  console.log(`| ${AGENTS} devices connected | ${fmt(connected / 1024)} |`);
  console.log(`| after ${ROUNDS * 2 * AGENTS} actions | ${fmt(peak / 1024)} |`);
  console.log(`| **per connected device** | **${fmt((connected - idle) / AGENTS)} KiB** |`);
  console.log("");
  console.log(`| action (sent to all ${AGENTS} at once) | one device p50 | one device p99 | all ${AGENTS} back p50 | all back p99 |`);
  console.log("| --- | ---: | ---: | ---: | ---: |");
  for (const [action, r] of Object.entries(results)) {
    const label = action === "noop" ? "`true` (a process per device)" : "built-in trigger_update_check (no process; each device then checks for updates)";
    console.log(`| ${label} | ${fmt(pct(r.each, 0.5))} ms | ${fmt(pct(r.each, 0.99))} ms | ${fmt(pct(r.all, 0.5))} ms | ${fmt(pct(r.all, 0.99))} ms |`);
  }
} finally {
  await Promise.all(agents.map((a) => a.stop()));
  server.kill("SIGTERM");
  await new Promise((r) => server.once("exit", r));
  rmSync(dir, { recursive: true, force: true });
}
