/**
 * Benchmark (figures printed, nothing asserted): start-up of the single executable, from spawn to
 * the first answer of GET /api/health, with an empty data dir and with an existing one, and its
 * idle memory two seconds after start; then the idle memory of `labgate agent` from the same
 * executable, approved, connected to a server and idle for two seconds, each with the environment
 * its systemd unit gives it (the Environment= lines of scripts/labgate.service and
 * scripts/labgate-agent.service). The first executable's figures are then set against the targets.
 *
 *   node --import tsx scripts/bench/start.ts [--runs 10] [--devices 10000] [--agent-only] [--no-unit-env]
 *        [--engine embedded|postgres|both] BINARY [BASELINE_BINARY]
 *
 * `--agent-only`: only the agent's figures (its server on an empty data dir, no start timed);
 * `--no-unit-env`: the server and the agent without their units' environment (malloc settings).
 *
 * The existing data dir holds `--devices` devices (written by a first start plus a direct insert
 * through the binary's own database, i.e. `labgate serve` then stopped). The executables take
 * turns run by run, so a change in the machine's load meets both. Beside each time, the CPU time
 * the process's main thread had used when the answer came (/proc/PID/task/PID/schedstat): a start's
 * critical path, much less sensitive to the machine's load than the wall time. Idle memory is the
 * median of three starts: RSS, of which anonymous (RssAnon: the process's own memory, what the
 * targets bound) and pages of files (mostly the executable's, clean and reclaimable), and PSS
 * (/proc/PID/smaps_rollup: RSS with each shared page divided among the processes that map it).
 * An arm64 executable runs under qemu-aarch64-static (for the record: emulated figures).
 * `--engine both` runs it all on the embedded engine, then on PostgreSQL (a throwaway cluster on
 * this machine, scripts/bench/engines.ts): a fresh database for each empty start, one with the
 * devices for the existing ones (the data dir then holds the rest).
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { once } from "node:events";
import { chmodSync, copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { Database } from "../../src/db/index.ts";
import { executableCommand } from "../../test/helpers/cli.ts";
import { flag } from "./flags.ts";
import { unitEnvironment } from "./unit-env.ts";
import { benchEngines, databaseUrlOf, runPerEngine, seedDevices, stopBenchPostgres } from "./engines.ts";

if (await runPerEngine()) process.exit(0);
const ENGINE = benchEngines()[0];

const SWITCHES = ["--agent-only", "--no-unit-env"];
const AGENT_ONLY = process.argv.includes("--agent-only");
const RUNS = AGENT_ONLY ? 0 : flag("runs", 10);
const DEVICES = AGENT_ONLY ? 0 : flag("devices", 10_000);
const given = process.argv
  .slice(2)
  .filter((a, i, all) => !a.startsWith("--") && !(all[i - 1]?.startsWith("--") && !SWITCHES.includes(all[i - 1])))
  .map((b) => resolve(b));
const unitEnv = unitEnvironment("labgate-agent.service");
const serverEnv = unitEnvironment("labgate.service");
const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-start-"));
// Each executable runs from a fresh copy: how many of a file's pages a process maps depends on how
// the file came into the page cache (one just written by postject showed about 15 MB more than a
// copy of it), so both get the same history.
const binaries = given.map((binary, b) => {
  const copy = join(work, `executable-${b}`);
  copyFileSync(binary, copy);
  chmodSync(copy, 0o755);
  return copy;
});
/** Spawns an executable, an arm64 one under qemu on another machine (its RSS then is qemu's, translated code included). */
const launch = (binary: string, args: string[], options: SpawnOptions) => {
  const [command, ...pre] = executableCommand(binary);
  return spawn(command, [...pre, ...args], options);
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const statusKiB = (pid: number, key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
interface Rss {
  rss: number;
  anon: number;
  file: number;
  pss: number;
}
/** A process's memory now (KiB). */
function memoryOf(pid: number): Rss {
  const pss = Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"))?.[1] ?? NaN);
  return { rss: statusKiB(pid, "VmRSS"), anon: statusKiB(pid, "RssAnon"), file: statusKiB(pid, "RssFile"), pss };
}
/** The footprint targets (MiB, ms), each for the first executable's median. */
const TARGETS = { startMs: 150, serverAnon: 40, serverRss: 90, agentAnon: 15, agentRss: 55 };

/** Starts `labgate serve` of the binary on `dataDir` and waits for its listening line. */
async function serve(binary: string, dataDir: string, databaseUrl = ""): Promise<{ child: ChildProcess; url: string }> {
  const database = databaseUrl ? ["--database-url", databaseUrl] : [];
  const child = launch(binary, ["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...database], { stdio: ["ignore", "pipe", "ignore"], env: { HOME: work, PATH: "/usr/bin:/bin", LABGATE_CONFIG: "", ...serverEnv }, cwd: work });
  let out = "";
  for await (const chunk of child.stdout!) {
    out += chunk;
    const url = /listening on (\S+)/.exec(out)?.[1];
    if (url) return { child, url };
  }
  throw new Error(`no start: ${out}`);
}

/** CPU time (ms) the main thread of process `pid` has run. */
const mainThreadMs = (pid: number) => Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;

/** Starts the binary on `dataDir`; resolves with ms to the first /api/health answer, the main thread's CPU ms by then, and the RSS after `idleMs`. */
async function start(binary: string, dataDir: string, databaseUrl = "", idleMs = 0): Promise<{ ms: number; cpu: number } & Rss> {
  const t0 = performance.now();
  const { child, url } = await serve(binary, dataDir, databaseUrl);
  const res = await fetch(`${url}/api/health`);
  await res.arrayBuffer();
  const ms = performance.now() - t0;
  const cpu = mainThreadMs(child.pid!);
  if (idleMs) await new Promise((r) => setTimeout(r, idleMs));
  const memory = memoryOf(child.pid!);
  child.kill("SIGTERM");
  await once(child, "exit");
  return { ms, cpu, ...memory };
}

console.log(AGENT_ONLY ? "labgate agent idle memory" : `labgate start-up benchmark (${ENGINE} engine): ${RUNS} runs each; existing data dir with ${DEVICES} devices`);
console.log(`the server's environment: ${JSON.stringify(serverEnv)}; the agent's: ${JSON.stringify(unitEnv)}`);
console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
// One existing data dir per executable, made by its own first start (their schemas may differ).
const existingDirs: string[] = [];
/** On PostgreSQL: each existing data dir's database. */
const existingUrls: string[] = [];
for (const [b, binary] of binaries.entries()) {
  const existing = join(work, `existing-${b}`);
  const url = await databaseUrlOf(ENGINE);
  await start(binary, existing, url);
  if (url) {
    const { openDatabase } = await import("../../src/db/open.ts");
    const opened = await openDatabase({ dataDir: existing, url, log: () => {} });
    await seedDevices(opened.store, DEVICES, 0x0c0000000000, JSON.stringify({ "svc.software.version": "v1", "svc.hardware.devtype": "board" }));
    await opened.close();
  } else {
    const db = await Database.open(existing);
    const now = new Date().toISOString();
    await db.write((tx) => {
      for (let i = 0; i < DEVICES; i++) {
        const mac = (0x0c0000000000 + i).toString(16).padStart(12, "0").match(/../g)!.join(":");
        tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata) VALUES (?, ?, ?, '{}', ?)", [now, mac, mac, JSON.stringify({ "svc.software.version": "v1", "svc.hardware.devtype": "board" })]);
      }
    });
    await db.close();
  }
  existingDirs.push(existing);
  existingUrls.push(url);
}
if (ENGINE === "embedded") console.log(`image ${(readFileSync(join(existingDirs[0], "labgate.db")).length / 1048576).toFixed(1)} MB`);
if (!AGENT_ONLY) console.log("\n| executable | empty data dir (median) | existing data dir (median) | main thread's CPU by then, existing dir (median) | idle RSS, existing dir (median of 3) | of which anonymous (RssAnon) | of which files' pages | PSS |");
if (!AGENT_ONLY) console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
const empty = binaries.map((): number[] => []);
const full = binaries.map((): number[] => []);
const fullCpu = binaries.map((): number[] => []);
const idle = binaries.map((): Rss[] => []);
for (let i = 0; i < RUNS; i++) {
  for (const [b, binary] of binaries.entries()) {
    const dir = join(work, `empty-${i}`);
    empty[b].push((await start(binary, dir, await databaseUrlOf(ENGINE))).ms);
    rmSync(dir, { recursive: true, force: true });
    const copy = join(work, `copy-${i}`);
    cpSync(existingDirs[b], copy, { recursive: true });
    const existing = await start(binary, copy, existingUrls[b]);
    full[b].push(existing.ms);
    fullCpu[b].push(existing.cpu);
    rmSync(copy, { recursive: true, force: true });
  }
}
for (let i = 0; i < (AGENT_ONLY ? 0 : 3); i++) {
  for (const [b, binary] of binaries.entries()) {
    const copy = join(work, "copy-rss");
    cpSync(existingDirs[b], copy, { recursive: true });
    idle[b].push(await start(binary, copy, existingUrls[b], 2000));
    rmSync(copy, { recursive: true, force: true });
  }
}
/** RSS of `labgate agent` (same binary), approved by and connected to a server on a copy of `dataDir`, after two idle seconds. */
async function agentIdle(binary: string, dataDir: string, databaseUrl: string, run: number): Promise<Rss> {
  const copy = join(work, "copy-agent");
  cpSync(dataDir, copy, { recursive: true });
  const { child: server, url } = await serve(binary, copy, databaseUrl);
  const token = readFileSync(join(copy, "admin.token"), "utf8").trim();
  const api = async (path: string, init: RequestInit = {}) => fetch(`${url}${path}`, { ...init, headers: { authorization: `Bearer token=${token}`, "content-type": "application/json" } });
  const mac = `0e:00:00:00:01:${run.toString(16).padStart(2, "0")}`;
  const agentDir = join(work, `agent-${run}`);
  const config = join(work, `agent-${run}.yaml`);
  writeFileSync(config, `server: ${url}\nkey_type: ed25519\nmac_address: "${mac}"\nretry_min_delay: 0.2\nretry_max_delay: 1\n`);
  const agent = launch(binary, ["agent", "--config", config, "--data-dir", agentDir], { stdio: "ignore", env: { HOME: work, PATH: "/usr/bin:/bin", ...unitEnv }, cwd: work });
  try {
    const until = async <T>(what: string, probe: () => Promise<T | undefined>): Promise<T> => {
      for (let i = 0; i < 600; i++) {
        // A refused or reset request (a slow emulated server) is one more try, not the end.
        const value = await probe().catch(() => undefined);
        if (value !== undefined) return value;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`agent benchmark: ${what} took over 60 s`);
    };
    const pending = await until("registration", async () => ((await (await api("/api/v1/auth/pending")).json()) as Array<{ mac_address: string; public_key: string }>).find((p) => p.mac_address === mac));
    await api("/api/v1/auth/register", { method: "POST", body: JSON.stringify({ mac_address: mac, public_key: pending.public_key }) });
    await until("connection", async () => ((await api(`/api/v2/devices/${mac}/action/list`)).status === 200 ? true : undefined));
    await new Promise((r) => setTimeout(r, 2000));
    return memoryOf(agent.pid!);
  } finally {
    agent.kill("SIGTERM");
    server.kill("SIGTERM");
    await Promise.all([once(agent, "exit"), once(server, "exit")]);
    rmSync(copy, { recursive: true, force: true });
    rmSync(agentDir, { recursive: true, force: true });
  }
}
const agents = binaries.map((): Rss[] => []);
for (let i = 0; i < 3; i++) {
  for (const [b, binary] of binaries.entries()) agents[b].push(await agentIdle(binary, existingDirs[b], existingUrls[b], b * 3 + i));
}

const mb = (kib: number) => `${(kib / 1024).toFixed(1)} MB`;
for (const b of AGENT_ONLY ? [] : binaries.keys()) {
  const rss = [...idle[b]].sort((x, y) => x.rss - y.rss)[1];
  console.log(`| ${given[b]} (${ENGINE}) | ${median(empty[b]).toFixed(0)} ms | ${median(full[b]).toFixed(0)} ms | ${median(fullCpu[b]).toFixed(0)} ms | ${mb(rss.rss)} | ${mb(rss.anon)} | ${mb(rss.file)} | ${mb(rss.pss)} |`);
}
console.log("\n| executable | `labgate agent` idle RSS, connected (median of 3) | of which anonymous (RssAnon) | of which files' pages | PSS |");
console.log("| --- | ---: | ---: | ---: | ---: |");
for (const b of binaries.keys()) {
  const rss = [...agents[b]].sort((x, y) => x.rss - y.rss)[1];
  console.log(`| ${given[b]} | ${mb(rss.rss)} | ${mb(rss.anon)} | ${mb(rss.file)} | ${mb(rss.pss)} |`);
}

/** The median of one memory figure (MiB) over the runs. */
const medianMiB = (runs: Rss[], key: keyof Rss) => median(runs.map((r) => r[key])) / 1024;
const targets: Array<[string, number, number, string]> = [
  ["agent connected, idle: RssAnon", medianMiB(agents[0], "anon"), TARGETS.agentAnon, "MB"],
  ["agent connected, idle: RSS", medianMiB(agents[0], "rss"), TARGETS.agentRss, "MB"],
];
if (!AGENT_ONLY) {
  targets.unshift(
    ["start, existing data dir", median(full[0]), TARGETS.startMs, "ms"],
    ["server idle: RssAnon", medianMiB(idle[0], "anon"), TARGETS.serverAnon, "MB"],
    ["server idle: RSS", medianMiB(idle[0], "rss"), TARGETS.serverRss, "MB"],
  );
}
console.log(`\n| ${given[0]} | median | target | |\n| --- | ---: | ---: | --- |`);
for (const [what, value, bound, unit] of targets) {
  const met = unit === "ms" ? value < bound : value <= bound;
  console.log(`| ${what} | ${value.toFixed(unit === "ms" ? 0 : 1)} ${unit} | ${unit === "ms" ? "<" : "<="} ${bound} ${unit} | ${met ? "met" : "NOT met"} |`);
}
if (binaries.length > 1 && !AGENT_ONLY) {
  const ratio = (xs: number[][]) => (median(xs[0]) / median(xs[1])).toFixed(2);
  const rss = (b: number) => median(idle[b].map((r) => r.rss));
  console.log(`\nfirst / second: empty ${ratio(empty)}, existing ${ratio(full)} (main thread's CPU ${ratio(fullCpu)}), idle RSS ${(rss(0) / rss(1)).toFixed(2)}`);
}
console.log(`load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
rmSync(work, { recursive: true, force: true });
await stopBenchPostgres();
