/**
 * Benchmark (figures printed, nothing asserted): the console's device list at lab scale (issue
 * 11). Seeds N devices (default 10,000) with a name, version and device type, then times
 * `GET /api/v2/devices` whole and paged (`limit`, `offset`, `q`) against an in-process server.
 *
 *   node --import tsx scripts/bench/device-list.ts [--devices 10000] [--rounds 20]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { loadConfig } from "../../src/config/config.ts";
import { SCOPES } from "../../src/auth/scopes.ts";
import { startServer } from "../../src/server/start.ts";
import { createLogger } from "../../src/util/log.ts";
import { flag } from "./flags.ts";

const DEVICES = flag("devices", 10_000);
const ROUNDS = flag("rounds", 20);

const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-list-"));
const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: join(work, "data"), listen: "127.0.0.1:0" } });
const server = await startServer(config, { log: createLogger("warn") });
try {
  const now = new Date().toISOString();
  await server.embedded!.write((tx) => {
    for (let i = 0; i < DEVICES; i++) {
      const mac = (0x020000000000 + i).toString(16).padStart(12, "0").match(/../g)!.join(":");
      const metadata = JSON.stringify({ "svc.software.version": `v${i % 7}`, "svc.hardware.devtype": i % 2 ? "board-a" : "board-b", "svc.hardware.macaddr": mac });
      tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata) VALUES (?, ?, ?, '{}', ?)", [now, `bench-${i}`, mac, metadata]);
    }
  });
  const token = server.ctx.tokens.issueManagement("bench", [...SCOPES], 3600);
  const headers = { authorization: `Bearer token=${token}` };

  const time = async (query: string) => {
    const ms: number[] = [];
    let bytes = 0;
    let total = "";
    for (let r = 0; r < ROUNDS; r++) {
      const started = performance.now();
      const res = await fetch(`${server.url}/api/v2/devices${query}`, { headers });
      bytes = (await res.arrayBuffer()).byteLength;
      ms.push(performance.now() - started);
      total = res.headers.get("x-total-count") ?? "-";
    }
    ms.sort((a, b) => a - b);
    const pct = (p: number) => ms[Math.min(ms.length - 1, Math.floor((ms.length * p) / 100))].toFixed(1);
    console.log(`${(query || "(whole list)").padEnd(34)} p50 ${pct(50).padStart(7)} ms  p90 ${pct(90).padStart(7)} ms  ${String(bytes).padStart(9)} bytes  X-Total-Count ${total}`);
  };

  console.log(`${DEVICES} devices, ${ROUNDS} requests each`);
  await time("");
  await time("?limit=50");
  await time(`?limit=50&offset=${DEVICES - 50}`);
  await time("?limit=50&q=bench-99");
  await time("?limit=50&q=board-a");
  await time("?limit=50&q=02:00:00:00:1");
  await time("?limit=50&q=no-such-device");
} finally {
  await server.close();
  rmSync(work, { recursive: true, force: true });
}
