/**
 * Benchmark (figures printed, nothing asserted): a fan-out by a caller without permission (issue
 * 25 item 6). D devices (default 10,000); `POST /api/v2/devices/action/exec` naming all of them by
 * a `svc_tests_ro` user who holds no device permission, by the same user naming D unknown MACs, and
 * by a user with read on one device (the permission query's path),
 * next to the baseline request `GET /api/health`: time, answer size and how long the event loop was held.
 *
 *   node --import tsx scripts/bench/fanout-denied.ts [--devices 10000] [--rounds 5]
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import { flag } from "./flags.ts";
import { inProcessServer, insertDevices, ms, percentile } from "./server.ts";

const DEVICES = flag("devices", 10_000);
const ROUNDS = flag("rounds", 5);

const bench = await inProcessServer();
const { server, url } = bench;
try {
  let macs: string[] = [];
  await server.embedded!.write((tx) => void (macs = insertDevices(tx, DEVICES, 0x020000000000)));
  const unknown = Array.from({ length: DEVICES }, (_, i) => (0x040000000000 + i).toString(16).padStart(12, "0").match(/../g)!.join(":"));
  const token = server.ctx.tokens.issueManagement("bench-nobody", ["tests_ro"], 3600);
  // A user with read on one device: its fan-out goes through the permission query.
  await server.embedded!.write((tx) => void tx.run("INSERT INTO permissions (created, user_id, resource, resource_id, permission) VALUES (?, 'bench-one', 'device', 1, 'read')", [new Date().toISOString()]));
  const one = server.ctx.tokens.issueManagement("bench-one", ["tests_ro"], 3600);

  const time = async (label: string, request: () => Promise<Response>) => {
    const times: number[] = [];
    let bytes = 0;
    const loop = monitorEventLoopDelay({ resolution: 1 });
    loop.enable();
    for (let r = 0; r < ROUNDS; r++) {
      const started = performance.now();
      bytes = (await (await request()).arrayBuffer()).byteLength;
      times.push(performance.now() - started);
    }
    loop.disable();
    console.log(`${label.padEnd(44)} p50 ${ms(percentile(times, 50))}  max ${ms(Math.max(...times))}  ${String(bytes).padStart(9)} bytes  event loop held up to ${ms(loop.max / 1e6)}`);
  };
  const fanOut = (devices: string[], as = token) =>
    fetch(`${url}/api/v2/devices/action/exec`, { method: "POST", headers: { authorization: `Bearer token=${as}`, "content-type": "application/json" }, body: JSON.stringify({ action_id: "x", devices }) });

  console.log(`${DEVICES} devices, ${ROUNDS} requests each`);
  await time("baseline: GET /api/health", () => fetch(`${url}/api/health`));
  await time(`fan-out, ${DEVICES} existing MACs, no permission`, () => fanOut(macs));
  await time(`fan-out, ${DEVICES} unknown MACs`, () => fanOut(unknown));
  await time(`fan-out, ${DEVICES} existing MACs, read on one`, () => fanOut(macs, one));
  await time("baseline again: GET /api/health", () => fetch(`${url}/api/health`));
} finally {
  await bench.close();
}
