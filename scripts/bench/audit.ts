/**
 * Benchmark (figures printed, nothing asserted): update checks with a quiet audit log and with a
 * busy one.
 *
 *   node --import tsx scripts/bench/audit.ts [--devices 10000] [--rows 1000000] [--actions 20]
 *        [--clients 50] [--seconds 10] [--rounds 2]
 *
 * Set-up (in-process): N devices in one group with packages v1.5 and v2 and the policy
 * exact_match,v2, a device token each; that data dir is copied, and the copy's audit log filled
 * with `--rows` entries (of the size management actions write).
 * Then `labgate serve` runs as its own process, in turn (`--rounds` times):
 * - idle: on the seeded data dir (a few audit entries), nobody acting: for reference;
 * - quiet: the same, while this process renames devices at `--actions` a second through the API
 *   (each rename is recorded: a `device.rename` entry);
 * - busy: on the full log with `audit.max_rows` = `--rows` and `audit.retention_interval: 1`, with
 *   the same renames (each pushes the log over max_rows, and retention drops the excess every
 *   second);
 * meanwhile the load generator (loadgen.ts, its own process) runs update checks of every device
 * for `--seconds`. Update checks are not audited: busy/quiet is what a full log and its retention
 * cost the checks, the recording and the renames being the same in both; quiet/idle what the
 * renames themselves cost (a rename changes what devices may be read: caches are rebuilt).
 * Prints the rates, p99s, the medians of both ratios, the renames made and the entries retention
 * dropped. Target (issue 29): busy/quiet >= 0.95.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { recordAudit, systemActor } from "../../src/audit/audit.ts";
import { loadConfig } from "../../src/config/config.ts";
import { startServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import type { LoadRequest, LoadResult } from "./loadgen.ts";
import { apiAs, listening, runLoad, seedFleet } from "./server.ts";
import { flag } from "./flags.ts";

const DEVICES = flag("devices", 10_000);
const ROWS = flag("rows", 1_000_000);
const ACTIONS = flag("actions", 20);
const CLIENTS = flag("clients", 50);
const SECONDS = flag("seconds", 10);
const ROUNDS = flag("rounds", 2);

const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-audit-"));
const quietDir = join(work, "quiet");
const busyDir = join(work, "busy");

interface Seeded {
  admin: string;
  devices: Array<{ id: number; mac: string; token: string }>;
}

async function seed(): Promise<Seeded> {
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: quietDir, listen: "127.0.0.1:0" } });
  const server = await startServer(config, { log: createLogger("error") });
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 86400);
  const { rows } = await seedFleet(server, apiAs(server.url, admin), DEVICES, 0x040000000000, "exact_match,v2");
  const devices = rows.map((r) => ({ id: r.id, mac: r.mac_address, token: server.ctx.tokens.issueDevice(r.mac_address, r.id, 30 * 86400) }));
  await server.close();
  return { admin, devices };
}

/** The busy copy: the seeded data dir with `ROWS` more entries, as management actions write them. */
async function fillBusy(): Promise<void> {
  cpSync(quietDir, busyDir, { recursive: true });
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: busyDir, listen: "127.0.0.1:0" } });
  config.audit.max_rows = ROWS + 1000;
  const server = await startServer(config, { log: createLogger("error") });
  const start = Date.now() - 30 * 86_400_000;
  for (let done = 0; done < ROWS; ) {
    const batch = Math.min(20_000, ROWS - done);
    await server.ctx.store.transact(async (tx) => {
      for (let i = 0; i < batch; i++, done++) {
        const actor = { ...systemActor("operator", new Date(start + done * 2000)), kind: "token" as const, tokenId: "0123456789abcdef01234567", client: "10.0.0.17" };
        await recordAudit(tx, actor, "device.rename", `device:${1 + (done % DEVICES)}`, { from: `bench-${done}`, to: `bench-${done + 1}` });
      }
    });
  }
  await server.close();
}

async function spawnServer(dataDir: string, busy: boolean): Promise<{ child: ChildProcess; url: string }> {
  const file = join(work, `${busy ? "busy" : "quiet"}.config.yaml`);
  writeFileSync(file, `log_level: warn\n${busy ? `audit:\n  max_rows: ${ROWS}\n  retention_interval: 1\n` : ""}`);
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "serve", "--config", file, "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, LABGATE_CONFIG: "" },
  });
  return listening(child);
}

/** Renames devices at ACTIONS a second until `stop` resolves; how many renames were made. */
async function manage(url: string, seeded: Seeded, stop: Promise<unknown>): Promise<number> {
  let over = false;
  void stop.then(() => (over = true));
  if (ACTIONS <= 0) return 0;
  let made = 0;
  const started = performance.now();
  while (!over) {
    const device = seeded.devices[made % seeded.devices.length];
    const res = await fetch(`${url}/api/v2/devices/${device.id}`, {
      method: "PATCH",
      headers: { authorization: `Bearer token=${seeded.admin}`, "content-type": "application/json" },
      body: JSON.stringify({ name: `renamed-${made}` }),
    });
    if (res.status !== 200) throw new Error(`rename: ${res.status} ${await res.text()}`);
    made += 1;
    const due = started + (made * 1000) / ACTIONS;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - performance.now())));
  }
  return made;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return (sorted[Math.floor((sorted.length - 1) / 2)] + sorted[Math.ceil((sorted.length - 1) / 2)]) / 2;
}

async function auditCount(url: string, admin: string): Promise<number> {
  const res = await fetch(`${url}/api/v1/audit?limit=1`, { headers: { authorization: `Bearer token=${admin}` } });
  return Number(res.headers.get("x-total-count"));
}

const fmt = (r: LoadResult) =>
  `${r.perSecond.toFixed(0).padStart(7)} checks/s  p50 ${r.p50.toFixed(2).padStart(6)} ms  p99 ${r.p99.toFixed(2).padStart(6)} ms  ` +
  `(${r.requests} requests; ${Object.entries(r.statuses).map(([s, n]) => `${s}: ${n}`).join(", ")}${r.errors ? `; ${r.errors} errors` : ""})`;

async function main(): Promise<void> {
  console.log(`labgate audit benchmark: ${DEVICES} devices, ${ROWS} audit entries, ${ACTIONS} management actions/s, ${CLIENTS} check clients, ${SECONDS} s, ${ROUNDS} rounds`);
  console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
  const seeded = await seed();
  let t = performance.now();
  await fillBusy();
  console.log(`filled the busy copy with ${ROWS} entries in ${((performance.now() - t) / 1000).toFixed(1)} s`);
  const checks: LoadRequest[] = seeded.devices.map((d) => ({
    method: "POST",
    path: "/api/v1/update/check",
    token: d.token,
    body: JSON.stringify({ "svc.software.version": "v1.5", "svc.hardware.devtype": "board", "svc.hardware.macaddr": d.mac }),
  }));
  const ratios: number[] = [];
  const renameCosts: number[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      const results: Partial<Record<"idle" | "quiet" | "busy", LoadResult>> = {};
      for (const kind of ["idle", "quiet", "busy"] as const) {
        t = performance.now();
        const server = await spawnServer(kind === "busy" ? busyDir : quietDir, kind === "busy");
        const startMs = performance.now() - t;
        try {
          const before = await auditCount(server.url, seeded.admin);
          const load = runLoad(work, { url: server.url, requests: checks, connections: CLIENTS, seconds: SECONDS, warmupSeconds: Math.max(3, DEVICES / 1000), client: "raw" });
          const made = kind === "idle" ? 0 : await manage(server.url, seeded, load);
          const result = await load;
          results[kind] = result;
          const after = await auditCount(server.url, seeded.admin);
          const extra = kind === "idle" ? "" : `; ${made} renames recorded, log ${before} -> ${after} entries${kind === "busy" ? ` (retention dropped ${before + made - after})` : ""}`;
          console.log(`round ${round} ${kind.padEnd(5)}  ${fmt(result)}  [start ${(startMs / 1000).toFixed(1)} s${extra}]`);
        } finally {
          server.child.kill("SIGTERM");
          await once(server.child, "exit");
        }
      }
      ratios.push(results.busy!.perSecond / results.quiet!.perSecond);
      renameCosts.push(results.quiet!.perSecond / results.idle!.perSecond);
    }
    console.log(`\nratio busy/quiet per round: ${ratios.map((r) => r.toFixed(3)).join(", ")}; median ${median(ratios).toFixed(3)}  (target: >= 0.95)`);
    console.log(`ratio quiet/idle per round (the renames' own cost): ${renameCosts.map((r) => r.toFixed(3)).join(", ")}; median ${median(renameCosts).toFixed(3)}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
