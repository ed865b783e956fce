/**
 * Benchmark (figures printed, nothing asserted): what an event costs with many event streams open
 * (issue 25 item 5). One device sends N `update_progress` messages (default 3,000) over its socket
 * while `/api/health` is asked every 10 ms, with: no other stream; S streams (default 100) of a user
 * who may read no device (among D devices, default 2,000); S streams of an admin. One admin stream
 * counts the events in every run (so each run ends when the last event went out).
 *
 *   node --import tsx scripts/bench/stream-events.ts [--messages 3000] [--streams 100] [--devices 2000]
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import WebSocket from "ws";
import { SCOPES } from "../../src/auth/scopes.ts";
import { flag } from "./flags.ts";
import { inProcessServer, insertDevices, ms, withHealth } from "./server.ts";

const MESSAGES = flag("messages", 3000);
const STREAMS = flag("streams", 100);
const DEVICES = flag("devices", 2000);

const bench = await inProcessServer();
const { server, url } = bench;
try {
  let macs: string[] = [];
  await server.embedded!.write((tx) => void (macs = insertDevices(tx, DEVICES, 0x020000000000)));
  const sender = server.embedded!.get<{ id: number }>("SELECT id FROM devices WHERE mac_address = ?", [macs[0]])!.id;
  const admin = server.ctx.tokens.issueManagement("bench-admin", [...SCOPES], 3600);
  const restricted = server.ctx.tokens.issueManagement("bench-nobody", ["tests_ro"], 3600);
  const ws = new WebSocket(`${url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${server.ctx.tokens.issueDevice(macs[0], sender, 3600)}` } });
  await new Promise((resolve, reject) => ws.once("open", resolve).once("error", reject));

  /** An open `/api/stream`; `events` counts the events it received so far. */
  const open = async (token: string) => {
    const controller = new AbortController();
    const res = await fetch(`${url}/api/stream`, { headers: { authorization: `Bearer token=${token}` }, signal: controller.signal });
    const stream = { events: 0, close: () => controller.abort() };
    void (async () => {
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) stream.events += Buffer.from(chunk).toString().split("event:update").length - 1;
      } catch {
        // closed
      }
    })();
    return stream;
  };

  const run = async (label: string, token: string | undefined) => {
    const others = token ? await Promise.all(Array.from({ length: STREAMS }, () => open(token))) : [];
    const counter = await open(admin);
    const cpu = process.cpuUsage();
    const loop = monitorEventLoopDelay({ resolution: 1 });
    loop.enable();
    const measured = await withHealth(url, async () => {
      for (let i = 0; i < MESSAGES; i++) ws.send(JSON.stringify({ method: "update_progress", progress: i % 100 }));
      while (counter.events < MESSAGES) await new Promise((resolve) => setTimeout(resolve, 5));
    });
    const used = process.cpuUsage(cpu);
    loop.disable();
    for (const stream of [...others, counter]) stream.close();
    console.log(
      `${label.padEnd(38)} ${MESSAGES} events in ${ms(measured.ms)}  CPU ${ms((used.user + used.system) / 1000)}  event loop held up to ${ms(loop.max / 1e6)}  /api/health p50 ${ms(measured.healthP50, 6)} max ${ms(measured.healthMax)} (${measured.healthCount} asked)`,
    );
  };

  console.log(`${DEVICES} devices; ${STREAMS} streams where said; the baseline request is /api/health alone`);
  const alone = await withHealth(url, () => new Promise((resolve) => setTimeout(resolve, 500)));
  console.log(`${"baseline: /api/health, nothing else".padEnd(38)} p50 ${ms(alone.healthP50, 6)} max ${ms(alone.healthMax)}`);
  await run("no other stream", undefined);
  await run(`${STREAMS} streams of a user who reads nothing`, restricted);
  await run(`${STREAMS} admin streams`, admin);
  ws.close();
} finally {
  await bench.close();
}
