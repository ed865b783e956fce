/**
 * Benchmark (figures printed, nothing asserted): update-check latency while durable commits and
 * checkpoints run, on a normal and on a slow disk.
 *
 *   node --import tsx scripts/bench/slow-disk.ts [--devices 2000] [--fill-mb 50] [--seconds 20]
 *        [--clients 20] [--commits 100] [--baseline DIR] [--sync-ms 30] [--mbps 20]
 *
 * A data dir is seeded once (N devices in 10 groups with a two-package chain each, and
 * `--fill-mb` of device log rows so that the image, and with it each checkpoint, is that big).
 * Each round copies it, starts `labgate serve` as its own process and, for `--seconds`, runs
 * update checks from the load generator (loadgen.ts, its own process, `--clients` connections)
 * while this process posts device logs at `--commits` per second (5 entries of 1 KB each, one
 * durable commit per post): the journal fills up and a checkpoint runs every 8 MiB of it, as in
 * production.
 *
 * "Slow disk" preloads slow-fs.mjs into the server: every fsync/fdatasync takes `--sync-ms`
 * plus the bytes written since the last one at `--mbps` (cheap eMMC or SD card). cgroup v2
 * `io.max` and dm-delay are not available on the machine this was written on (cgroup v1,
 * no device-mapper), so the delay is injected at the file layer, in the benchmark only.
 * `--baseline DIR` runs the same rounds against the server in another checkout (e.g. a `git
 * worktree` of an older commit with node_modules linked) to compare in the same run.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { loadConfig } from "../../src/config/config.ts";
import { startServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import type { LoadRequest, LoadResult, LoadSpec } from "./loadgen.ts";
import { insertDevices, listening, runLoad } from "./server.ts";
import { flag, textFlag } from "./flags.ts";

const DEVICES = flag("devices", 2000);
const FILL_MB = flag("fill-mb", 50);
const SECONDS = flag("seconds", 20);
const CLIENTS = flag("clients", 20);
const COMMITS_PER_S = flag("commits", 100);
const SYNC_MS = flag("sync-ms", 30);
const MBPS = flag("mbps", 20);
const BASELINE = textFlag("baseline");
const GROUPS = 10;

const here = resolve(import.meta.dirname, "../..");
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-slowdisk-"));
const seedDir = join(work, "seed");

interface Target {
  token: string;
  body: string;
}

async function seed(): Promise<Target[]> {
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: seedDir, listen: "127.0.0.1:0" } });
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
  const devices = server.embedded!.all<{ id: number; mac_address: string }>("SELECT id, mac_address FROM devices ORDER BY id");
  const now = new Date().toISOString();
  const entry = "l".repeat(1000);
  const rows = Math.ceil((FILL_MB * 1024 * 1024) / 1150);
  for (let done = 0; done < rows; done += 5000) {
    await server.embedded!.write((tx) => {
      for (let i = done; i < Math.min(rows, done + 5000); i++) {
        tx.run("INSERT INTO device_logs (device_id, created, device_timestamp, name, entry) VALUES (?, ?, ?, ?, ?)", [devices[i % devices.length].id, now, now, "fill", entry]);
      }
    });
  }
  const targets: Target[] = [];
  for (let g = 0; g < GROUPS; g++) {
    const ids: number[] = [];
    for (let v = 1; v <= 2; v++) {
      const form = new FormData();
      form.set("svc.software.version", `g${g}-v${v + 1}`);
      form.set("svc.hardware.devtype", "board");
      if (v > 1) form.set("requires:svc.software.version", `g${g}-v${v}`);
      form.set("file", new Blob([`package ${g}/${v}`]), "p.bin");
      ids.push((await call("POST", "/api/v1/packages", undefined, form)).id);
    }
    const group = await call("POST", "/api/v2/groups", { metadata: { name: `group ${g}` }, priority: g });
    await call("POST", `/api/v2/groups/${group.id}/policy`, { policy: `exact_match,g${g}-v3` });
    await call("POST", `/api/v2/groups/${group.id}/package`, { packages: ids });
    const members = devices.filter((_, i) => i % GROUPS === g);
    await call("PATCH", `/api/v2/groups/${group.id}/devices`, { add: members.map((d) => d.id), remove: [] });
    for (const device of members) {
      targets.push({
        token: server.ctx.tokens.issueDevice(device.mac_address, device.id, 86400),
        body: JSON.stringify({ "svc.software.version": `g${g}-v${device.id % 2 ? 1 : 2}`, "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.mac_address }),
      });
    }
  }
  await server.close();
  return targets;
}

async function spawnServer(root: string, dataDir: string, slow: boolean): Promise<{ child: ChildProcess; url: string }> {
  const preload = slow ? ["--import", join(here, "scripts/bench/slow-fs.mjs")] : [];
  const child = spawn(process.execPath, [...preload, "--import", "tsx", join(root, "src/main.ts"), "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
    cwd: root,
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, LABGATE_CONFIG: join(work, "bench.config.yaml"), SLOW_FS_SYNC_MS: String(SYNC_MS), SLOW_FS_MBPS: String(MBPS) },
  });
  return listening(child);
}

const load = (spec: LoadSpec): Promise<LoadResult> => runLoad(work, spec);

const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))] : NaN);

/** Posts device logs at a steady rate (at most 8 in flight, so that a slow server is not buried) until `stop`. */
async function commits(url: string, targets: Target[], stop: { done: boolean }): Promise<{ latencies: number[]; failed: Map<string, number>; seconds: number }> {
  const latencies: number[] = [];
  const failed = new Map<string, number>();
  const entry = "c".repeat(1000);
  const stamp = new Date().toUTCString();
  const body = JSON.stringify({ batch: Array.from({ length: 5 }, () => ({ device_timestamp: stamp, name: "bench", entry })) });
  const interval = (1000 / COMMITS_PER_S) * 8;
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async (_, lane) => {
      for (let i = lane; !stop.done; i += 8) {
        const wait = started + (i / 8) * interval - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const t = targets[next++ % targets.length];
        const s = performance.now();
        try {
          const res = await fetch(`${url}/api/v1/logs`, { method: "POST", headers: { authorization: `Bearer token=${t.token}`, "content-type": "application/json" }, body });
          await res.arrayBuffer();
          if (res.status === 200) latencies.push(performance.now() - s);
          else failed.set(String(res.status), (failed.get(String(res.status)) ?? 0) + 1);
        } catch (error) {
          const key = (error as Error).message;
          failed.set(key, (failed.get(key) ?? 0) + 1);
        }
      }
    }),
  );
  return { latencies, failed, seconds: (performance.now() - started) / 1000 };
}

/** Counts completed checkpoints by watching /api/health's last_checkpoint. */
function watchCheckpoints(url: string, stop: { done: boolean }): Promise<number> {
  return (async () => {
    const seen = new Set<string>();
    while (!stop.done) {
      const health = (await (await fetch(`${url}/api/health`)).json()) as { database: { last_checkpoint: string | null } };
      if (health.database.last_checkpoint) seen.add(health.database.last_checkpoint);
      await new Promise((r) => setTimeout(r, 250));
    }
    return seen.size;
  })();
}

async function round(root: string, slow: boolean, targets: Target[], checks: LoadRequest[]): Promise<string> {
  const dataDir = join(work, "run");
  rmSync(dataDir, { recursive: true, force: true });
  cpSync(seedDir, dataDir, { recursive: true });
  const server = await spawnServer(root, dataDir, slow);
  try {
    const stop = { done: false };
    const baseline = await watchCheckpointsOnce(server.url);
    const writer = commits(server.url, targets, stop);
    const checkpoints = watchCheckpoints(server.url, stop);
    const result = await load({ url: server.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: 2, client: "raw" });
    stop.done = true;
    const { latencies, failed, seconds } = await writer;
    const failures = [...failed].map(([why, n]) => `${n} x ${why}`).join(", ");
    const count = (await checkpoints) - (baseline ? 1 : 0);
    const label = root === here ? "this tree" : "baseline";
    return (
      `| ${label} | ${slow ? `slow (${SYNC_MS} ms + ${MBPS} MB/s)` : "normal"} | ${result.perSecond.toFixed(0)} | ${result.p50.toFixed(2)} ms | ${result.p99.toFixed(2)} ms | ` +
      `${result.max.toFixed(0)} ms | ${(latencies.length / seconds).toFixed(0)}/s | ${pct(latencies, 0.5).toFixed(1)} ms | ${pct(latencies, 0.99).toFixed(1)} ms | ${count}${failures ? ` (failed: ${failures})` : ""} |`
    );
  } finally {
    server.child.kill("SIGTERM");
    await once(server.child, "exit");
  }
}

async function watchCheckpointsOnce(url: string): Promise<string | null> {
  const health = (await (await fetch(`${url}/api/health`)).json()) as { database: { last_checkpoint: string | null } };
  return health.database.last_checkpoint;
}

console.log(`labgate slow-disk benchmark: ${DEVICES} devices, ~${FILL_MB} MB image, ${CLIENTS} update-check clients, ${COMMITS_PER_S} commits/s of 5 KB, ${SECONDS} s per round`);
console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
writeFileSync(join(work, "bench.config.yaml"), "log_level: warn\n");
const targets = await seed();
console.log(`seeded: image ${(readFileSync(join(seedDir, "labgate.db")).length / 1048576).toFixed(1)} MB`);
const checks: LoadRequest[] = targets.map((t) => ({ method: "POST", path: "/api/v1/update/check", token: t.token, body: t.body }));
const rows: string[] = [];
for (const root of BASELINE ? [resolve(BASELINE), here] : [here]) {
  for (const slow of [false, true]) {
    const row = await round(root, slow, targets, checks);
    console.log(row);
    rows.push(row);
  }
}
console.log("\n| server | disk | checks/s | check p50 | check p99 | check max | commits | commit p50 | commit p99 | checkpoints |");
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const row of rows) console.log(row);
console.log(`load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
rmSync(work, { recursive: true, force: true });
