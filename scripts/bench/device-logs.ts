/**
 * Benchmark (figures printed, nothing asserted): device logs at their bounds (issue 25 item 8).
 * D devices (default 25) each send batches of 4096-byte entries (1,365 three-byte characters and
 * one more byte) until their byte quota is full (and once more); then: RSS before and after, the
 * stored bytes, `GET /api/v1/logs/group/1` whole (streamed) and one page, with /api/health asked
 * every 10 ms meanwhile; and update checks (p50, p99) of one device alone and while another sends
 * full batches in a loop (beyond its rate: 429), next to the baseline request `GET /api/health`.
 *
 *   node --import tsx scripts/bench/device-logs.ts [--devices 25] [--checks 300]
 */
import { Worker } from "node:worker_threads";
import { flag } from "./flags.ts";
import { inProcessServer, insertDevices, ms, percentile, withHealth } from "./server.ts";

const DEVICES = flag("devices", 25);
const CHECKS = flag("checks", 300);
const MiB = 1048576;

const bench = await inProcessServer();
const { server, url } = bench;
try {
  let macs: string[] = [];
  await server.embedded!.write((tx) => {
    macs = insertDevices(tx, DEVICES + 1, 0x020000000000);
    const group = tx.run("INSERT INTO groups (created, metadata, policy, priority) VALUES (?, '{}', '', 0)", [new Date().toISOString()]).lastInsertRowid;
    tx.run("INSERT INTO group_devices (group_id, device_id) SELECT ?, id FROM devices", [group]);
  });
  const tokens = macs.map((mac) => {
    const { id } = server.embedded!.get<{ id: number }>("SELECT id FROM devices WHERE mac_address = ?", [mac])!;
    return server.ctx.tokens.issueDevice(mac, id, 3600);
  });
  const admin = server.ctx.tokens.issueManagement("bench", ["admin_ro"], 3600);
  const limits = server.ctx.config.update_server;
  const entry = "€".repeat(1365) + "x";
  const batch = JSON.stringify({ batch: Array.from({ length: 200 }, (_, i) => ({ device_timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toUTCString(), name: "metric", entry })) });
  const post = (token: string) => fetch(`${url}/api/v1/logs`, { method: "POST", headers: { authorization: `Bearer token=${token}`, "content-type": "application/json" }, body: batch });
  const rss = () => process.memoryUsage().rss / MiB;

  console.log(`${DEVICES} devices; quota ${limits.device_log_bytes_per_device} bytes and ${limits.device_logs_per_device} entries a device, ${limits.device_logs_per_minute} entries a minute`);
  const health = await withHealth(url, () => new Promise((resolve) => setTimeout(resolve, 300)));
  console.log(`baseline: /api/health p50 ${ms(health.healthP50)} max ${ms(health.healthMax)}`);
  const rssBefore = rss();
  const filling = performance.now();
  const statuses = new Map<number, number>();
  for (const token of tokens.slice(0, DEVICES)) {
    // 200 entries of 4 KiB a batch: 800 KiB, past a 1 MiB quota in two.
    for (let i = 0; i < 3; i++) {
      const res = await post(token);
      await res.arrayBuffer();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
  }
  const stored = server.embedded!.get<{ n: number; bytes: number }>("SELECT COUNT(*) AS n, SUM(bytes) AS bytes FROM device_logs")!;
  console.log(
    `filled in ${ms(performance.now() - filling)}: answers ${[...statuses].map(([s, n]) => `${n}x${s}`).join(" ")}; ${stored.n} entries, ${(stored.bytes / MiB).toFixed(1)} MiB stored; RSS ${rssBefore.toFixed(0)} -> ${rss().toFixed(0)} MiB`,
  );

  const list = async (query: string) => {
    let bytes = 0;
    let total = "";
    const rssStart = rss();
    let peak = rssStart;
    const sampler = setInterval(() => (peak = Math.max(peak, rss())), 20);
    const measured = await withHealth(url, async () => {
      const res = await fetch(`${url}/api/v1/logs/group/1${query}`, { headers: { authorization: `Bearer token=${admin}` } });
      total = res.headers.get("x-total-count") ?? "-";
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) bytes += chunk.byteLength;
    });
    clearInterval(sampler);
    console.log(
      `GET /api/v1/logs/group/1${query.padEnd(18)} ${ms(measured.ms)}  ${(bytes / MiB).toFixed(1).padStart(6)} MiB  X-Total-Count ${total}  /api/health p50 ${ms(measured.healthP50)} max ${ms(measured.healthMax)}  peak RSS ${peak.toFixed(0)} MiB`,
    );
  };
  await list("");
  await list("?limit=100");
  await list("?limit=100&offset=5000");

  /** Posts full batches with `token` in a loop from a worker thread (its own event loop, as another machine would); returns how to stop it and how many 429s it got. */
  const flood = (token: string) => {
    const worker = new Worker(
      `const { workerData, parentPort } = require("node:worker_threads");
       let running = true, refused = 0;
       parentPort.on("message", () => (running = false));
       (async () => {
         while (running) {
           const res = await fetch(workerData.url + "/api/v1/logs", { method: "POST", headers: { authorization: "Bearer token=" + workerData.token, "content-type": "application/json" }, body: workerData.batch });
           await res.arrayBuffer();
           if (res.status === 429) refused++;
         }
         parentPort.postMessage(refused);
       })();`,
      { eval: true, workerData: { url, token, batch } },
    );
    return () => {
      worker.postMessage("stop");
      return new Promise<number>((resolve) => worker.once("message", (refused: number) => void worker.terminate().then(() => resolve(refused))));
    };
  };

  const checks = async (label: string, withFlood: boolean) => {
    const stop = withFlood ? flood(tokens[DEVICES]) : undefined;
    const times: number[] = [];
    for (let i = 0; i < CHECKS; i++) {
      const started = performance.now();
      const res = await fetch(`${url}/api/v1/update/check`, {
        method: "POST",
        headers: { authorization: `Bearer token=${tokens[0]}`, "content-type": "application/json" },
        body: JSON.stringify({ "svc.software.version": "v1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": macs[0] }),
      });
      await res.arrayBuffer();
      times.push(performance.now() - started);
    }
    const refused = await stop?.();
    console.log(`update checks ${label.padEnd(40)} p50 ${ms(percentile(times, 50))}  p99 ${ms(percentile(times, 99))}${stop ? `  (the sender got ${refused} 429s)` : ""}`);
  };
  await checks("alone", false);
  await checks("while a device sends full batches", true);
} finally {
  await bench.close();
}
