/**
 * Benchmark (figures printed, nothing asserted): what a flood of refused requests costs a real
 * `labgate serve` process in memory, beside the same number of accepted ones measured in the same
 * run. Refused: cross-site writes (403), an unknown route sent cross-site (403), deletes with a
 * forged session cookie and a 4 KB User-Agent (403), forged bearer tokens (401), as
 * test/update/abuse-corpus.test.ts sends them (that test checks what they write to the audit log).
 * Accepted: `GET /api/health`. Each flood's figure is the server's RSS after it minus before it
 * (VmRSS, and RssAnon: the process's own memory, without the executable's clean pages).
 *
 *   node --import tsx scripts/bench/refusal-flood.ts [--requests 1000] [--rounds 3]
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { flood, type FloodRequest } from "../../test/audit/helpers.ts";
import { flag } from "./flags.ts";
import { listening } from "./server.ts";

const REQUESTS = flag("requests", 1000);
const ROUNDS = flag("rounds", 3);
const MB = 1024 * 1024;

const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-"));
// Warnings only: a log line per request would be most of what the floods measure.
writeFileSync(join(work, "labgate.yaml"), "log_level: warn\n");
const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "serve", "--data-dir", join(work, "data"), "--listen", "127.0.0.1:0"], {
  stdio: ["ignore", "pipe", "inherit"],
  env: { ...process.env, LABGATE_CONFIG: join(work, "labgate.yaml") },
});
const { url } = await listening(child);

/** The server's resident and private memory (bytes), from /proc. */
function memory(): { rss: number; anon: number } {
  const status = readFileSync(`/proc/${child.pid}/status`, "utf8");
  const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), anon: kb("RssAnon") };
}

const evil = { Origin: "http://evil.example" };
const floods: Array<[string, (i: number) => FloodRequest, number]> = [
  ["accepted: GET /api/health (baseline)", () => ({ method: "GET", path: "/api/health" }), REQUESTS],
  ["refused: POST /api/v2/groups cross-site", () => ({ method: "POST", path: "/api/v2/groups", headers: evil }), REQUESTS],
  ["refused: PUT of unknown routes, cross-site", (i) => ({ method: "PUT", path: `/no/such/route/${i}`, headers: { "Sec-Fetch-Site": "cross-site" } }), REQUESTS],
  ["refused: DELETE with forged cookies", (i) => ({ method: "DELETE", path: `/api/v1/packages/${i}`, headers: { ...evil, Cookie: `labgate_session=forged${i}`, "User-Agent": "x".repeat(4000) } }), REQUESTS],
  ["refused: GET with forged tokens", (i) => ({ method: "GET", path: "/api/v1/devices", headers: { Authorization: `Bearer token=forged.${i}.x` } }), REQUESTS],
];

try {
  // A first pass of every kind warms the server up (code, caches): the rounds measure what stays.
  for (const [, make] of floods) await flood(url, 200, make);
  const idle = memory();
  console.log(`server idle after warm-up: RSS ${(idle.rss / MB).toFixed(1)} MB, RssAnon ${(idle.anon / MB).toFixed(1)} MB; ${REQUESTS} requests per flood, ${ROUNDS} rounds`);
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [name, make, count] of floods) {
      const before = memory();
      const started = performance.now();
      const statuses = await flood(url, count, make);
      const ms = performance.now() - started;
      const after = memory();
      const grew = (a: number, b: number) => `${((b - a) / MB).toFixed(1).padStart(6)} MB`;
      console.log(`round ${round}  ${name.padEnd(44)} RSS ${grew(before.rss, after.rss)}  RssAnon ${grew(before.anon, after.anon)}  ${ms.toFixed(0).padStart(6)} ms  ${JSON.stringify(statuses)}`);
    }
  }
} finally {
  child.kill("SIGTERM");
  await new Promise((resolve) => child.once("exit", resolve));
  rmSync(work, { recursive: true, force: true });
}
