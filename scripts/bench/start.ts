/**
 * Benchmark (figures printed, nothing asserted): start-up of the single executable, from spawn to
 * the first answer of GET /api/health, with an empty data dir and with an existing one, and its
 * idle RSS two seconds after start.
 *
 *   node --import tsx scripts/bench/start.ts [--runs 10] [--devices 10000] BINARY [BASELINE_BINARY]
 *
 * The existing data dir holds `--devices` devices (written by a first start plus a direct insert
 * through the binary's own database, i.e. `labgate serve` then stopped).
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Database } from "../../src/db/index.ts";
import { flag } from "./flags.ts";

const RUNS = flag("runs", 10);
const DEVICES = flag("devices", 10_000);
const binaries = process.argv.slice(2).filter((a, i, all) => !a.startsWith("--") && !all[i - 1]?.startsWith("--")).map((b) => resolve(b));
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-start-"));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rssKiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);

/** Starts the binary on `dataDir`; resolves with ms to the first /api/health answer and the RSS after `idleMs`. */
async function start(binary: string, dataDir: string, idleMs = 0): Promise<{ ms: number; rss: number }> {
  const t0 = performance.now();
  const child = spawn(binary, ["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "ignore"], env: { HOME: work, PATH: "/usr/bin:/bin", LABGATE_CONFIG: "" }, cwd: work });
  let out = "";
  let url: string | undefined;
  for await (const chunk of child.stdout!) {
    out += chunk;
    url = /listening on (\S+)/.exec(out)?.[1];
    if (url) break;
  }
  if (!url) throw new Error(`no start: ${out}`);
  const res = await fetch(`${url}/api/health`);
  await res.arrayBuffer();
  const ms = performance.now() - t0;
  if (idleMs) await new Promise((r) => setTimeout(r, idleMs));
  const rss = rssKiB(child.pid!);
  child.kill("SIGTERM");
  await once(child, "exit");
  return { ms, rss };
}

console.log(`labgate start-up benchmark: ${RUNS} runs each; existing data dir with ${DEVICES} devices`);
console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
const existing = join(work, "existing");
await start(binaries[0], existing);
const db = await Database.open(existing);
const now = new Date().toISOString();
await db.write((tx) => {
  for (let i = 0; i < DEVICES; i++) {
    const mac = (0x0c0000000000 + i).toString(16).padStart(12, "0").match(/../g)!.join(":");
    tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata) VALUES (?, ?, ?, '{}', ?)", [now, mac, mac, JSON.stringify({ "svc.software.version": "v1", "svc.hardware.devtype": "board" })]);
  }
});
await db.close();
console.log(`image ${(readFileSync(join(existing, "labgate.db")).length / 1048576).toFixed(1)} MB`);
console.log("\n| executable | empty data dir (median) | existing data dir (median) | idle RSS, existing dir |");
console.log("| --- | ---: | ---: | ---: |");
for (const binary of binaries) {
  const empty: number[] = [];
  const full: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const dir = join(work, `empty-${i}`);
    empty.push((await start(binary, dir)).ms);
    rmSync(dir, { recursive: true, force: true });
    const copy = join(work, `copy-${i}`);
    cpSync(existing, copy, { recursive: true });
    full.push((await start(binary, copy)).ms);
    rmSync(copy, { recursive: true, force: true });
  }
  const copy = join(work, "copy-rss");
  cpSync(existing, copy, { recursive: true });
  const { rss } = await start(binary, copy, 2000);
  rmSync(copy, { recursive: true, force: true });
  console.log(`| ${binary} | ${median(empty).toFixed(0)} ms | ${median(full).toFixed(0)} ms | ${(rss / 1024).toFixed(1)} MB |`);
}
console.log(`load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
rmSync(work, { recursive: true, force: true });
