/*
 * Board consoles (issue 46): a board's serial port (a socat pseudo-terminal as the tty, a TCP
 * server as ser2net) read continuously into a bounded ring on disk; GET /api/v2/devices/{id}/console
 * from a byte offset; a port that is missing or vanishes is opened again and breaks nothing else;
 * a power cycle's boot log arrives on the console; the ring survives a restart.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { RETRY_MS } from "../../src/lab/console.ts";
import { boardPrints, labConfig, serialPair, type SerialPair } from "./helpers.ts";
import { FAST_SERVER } from "../update/helpers/agents.ts";
import { protocolDevice, type ProtocolDevice } from "../testrun/device-helpers.ts";
import { uploadConfig, waitRun } from "../testrun/run-helpers.ts";

const dir = tempDir("labgate-console-");
const BOOT = "U-Boot 2024.01 (Jan 01 2024)\r\nDRAM: 512 MiB\r\nStarting kernel ...\r\n";
const MACS = { tty: "02:00:00:46:02:01", tcp: "02:00:00:46:02:02", missing: "02:00:00:46:02:03", plain: "02:00:00:46:02:04" };
const RUN_MAC = "02:00:00:46:02:05";

let tty: SerialPair;
/** The console of the board that runs tests. */
let runTty: SerialPair;
const agents: ProtocolDevice[] = [];
/** A ser2net stand-in: prints the boot log to whoever connects. */
const sockets = new Set<Socket>();
const ser2net = createServer((socket) => {
  sockets.add(socket);
  socket.on("close", () => sockets.delete(socket));
  socket.write("ser2net board: " + BOOT);
});
after(async () => {
  agents.forEach((a) => a.close());
  await tty?.close();
  await runTty?.close();
  for (const s of sockets) s.destroy();
  ser2net.close();
});
const server = useTestServer(async () => {
  tty = await serialPair(dir, "ttyUSB0");
  runTty = await serialPair(dir, "ttyUSB1");
  ser2net.listen(0, "127.0.0.1");
  await once(ser2net, "listening");
  return {
    lab: labConfig(
      [
        {
          device: MACS.tty,
          serial: { port: tty.port, baud: 115200 },
          // The board "boots" when powered on: its boot log goes out on its console.
          power: { driver: "command", on: ["sh", "-c", `printf '${BOOT.replaceAll("\r\n", "\\r\\n")}' > ${tty.board}`], off: ["true"], delay: 0 },
        },
        { device: MACS.tcp, serial: { tcp: `127.0.0.1:${(ser2net.address() as AddressInfo).port}` } },
        { device: MACS.missing, serial: { port: `${dir}/ttyACM9`, baud: 9600 } },
        { device: RUN_MAC, serial: { port: runTty.port } },
      ],
      { console_bytes: 4096 },
    ),
    ...FAST_SERVER,
    test_server: { device_wait: 5 },
  };
}, (s) => uploadConfig(s, "boot.yml", "tests:\n  g:\n  - exec:\n      command: [true]\n"));

const ids: Record<keyof typeof MACS, number> = {} as never;
async function setup(): Promise<void> {
  if (ids.tty) return;
  const seeded = await seedDevices(server, 4);
  await server.db.write(async (tx) => {
    for (const [i, name] of (Object.keys(MACS) as (keyof typeof MACS)[]).entries()) {
      await tx.run("UPDATE devices SET mac_address = ?, name = ? WHERE id = ?", [MACS[name], `board-${name}`, seeded[i]!.id]);
      ids[name] = seeded[i]!.id;
    }
  });
}
async function read(name: keyof typeof MACS, since?: number, token?: string) {
  const res = await server.request(`/api/v2/devices/${ids[name]}/console${since === undefined ? "" : `?since=${since}`}`, { token: token ?? server.adminToken });
  return { status: res.status, text: await res.text(), start: Number(res.headers.get("x-console-start")), end: Number(res.headers.get("x-console-end")), status_: res.headers.get("x-console-status"), type: res.headers.get("content-type") };
}
/** The console's status once it is `connected` (the capture opens its port in the background). */
const connected = (name: keyof typeof MACS) => waitFor(async () => (await read(name)).status_ === "connected", 10_000, `${name}'s console to be read`);

describe("board consoles", () => {
  test("a tty's output is captured and read from an offset; a power-on's boot log arrives on it", async () => {
    await setup();
    await connected("tty");
    boardPrints(tty, "early output\r\n");
    const first = await waitFor(async () => {
      const r = await read("tty");
      return r.text.includes("early output") ? r : undefined;
    }, 5000, "the first output");
    assert.equal(first.status, 200);
    assert.equal(first.type, "text/plain; charset=utf-8");
    assert.equal(first.start, 0);
    assert.equal(first.end, Buffer.byteLength(first.text));

    assert.equal((await server.call("POST", `/api/v2/devices/${ids.tty}/power/on`)).status, 200);
    const boot = await waitFor(async () => {
      const r = await read("tty", first.end);
      return r.text === BOOT ? r : undefined;
    }, 5000, "the boot log after the power-on");
    assert.equal(boot.start, first.end, "since: only what came after");
  });

  test("a TCP console (ser2net) is read too", async () => {
    await setup();
    await connected("tcp");
    const r = await waitFor(async () => {
      const got = await read("tcp");
      return got.text.includes("Starting kernel") ? got : undefined;
    }, 5000, "the TCP console's output");
    assert.equal(r.text, "ser2net board: " + BOOT);
  });

  test("the ring keeps at most lab.console_bytes, the newest", async () => {
    await setup();
    await connected("tty");
    const before = (await read("tty")).end;
    const lines = Array.from({ length: 200 }, (_, i) => `line ${String(i).padStart(4, "0")} ${"x".repeat(40)}\n`).join("");
    boardPrints(tty, lines);
    const r = await waitFor(async () => {
      const got = await read("tty");
      return got.end === before + lines.length ? got : undefined;
    }, 5000, "every line to arrive");
    assert.ok(r.text.length <= 4096, `${r.text.length} bytes kept`);
    assert.ok(r.start > 0);
    assert.ok(r.text.endsWith("line 0199 " + "x".repeat(40) + "\n"));
    assert.equal((await read("tty", 0)).start, r.start, "since before the oldest kept: from the oldest");
  });

  test("a port that does not exist or vanishes says why and is opened again; other boards go on", async () => {
    await setup();
    const missing = await read("missing");
    assert.equal(missing.status, 200);
    assert.equal(missing.text, "");
    assert.match(missing.status_!, /ttyACM9 does not exist$/);

    await tty.close();
    await waitFor(async () => (await read("tty")).status_ !== "connected", 5000, "the vanished tty to be noticed");
    assert.match((await read("tcp")).status_!, /^connected$/, "the other board's console goes on");
    const end = (await read("tty")).end;
    tty = await serialPair(dir, "ttyUSB0");
    server.clock.advance(RETRY_MS);
    await connected("tty");
    boardPrints(tty, "back again\r\n");
    await waitFor(async () => (await read("tty", end)).text === "back again\r\n", 5000, "output after the tty came back");
  });

  test("read needs read on the device; a device without a console port is a 409; a bad since a 400", async () => {
    await setup();
    assert.equal((await read("tty", undefined, server.token([], "eve46"))).status, 404);
    const plain = await read("plain");
    assert.equal(plain.status, 409);
    assert.match(plain.text, /device board-plain has no console port in lab\.boards/);
    const bad = await server.request(`/api/v2/devices/${ids.tty}/console?since=abc`, { token: server.adminToken });
    assert.equal(bad.status, 400);
  });

  test("a test run on a board leaves what its console printed during the run as console.log", async () => {
    const agent = await protocolDevice(server, "board-run", RUN_MAC);
    agents.push(agent);
    await waitFor(async () => (await server.request(`/api/v2/devices/${agent.id}/console`, { token: server.adminToken })).headers.get("x-console-status") === "connected", 10_000, "the run board's console");
    boardPrints(runTty, "before the run\r\n");
    await waitFor(async () => (await (await server.request(`/api/v2/devices/${agent.id}/console`, { token: server.adminToken })).text()).includes("before the run"), 5000, "output before the run");
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "boot.yml", machine_target: "device:board-run" });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    const start = await agent.next("test_run_start");
    boardPrints(runTty, "[ 1.234] test: running g\r\n");
    await waitFor(async () => (await (await server.request(`/api/v2/devices/${agent.id}/console`, { token: server.adminToken })).text()).includes("running g"), 5000, "output during the run");
    agent.send({ method: "test_run_end", run_id: start.run_id, status: "finished", error: null, warnings: [] });
    const run = await waitRun(server, started.body.id);
    const deviceDir = (run.devices as Array<{ dir: string }>)[0]!.dir;
    const log = await server.request(`/api/v1/test-runs/${run.id}/artifacts/${deviceDir}/console.log`, { token: server.adminToken });
    assert.equal(log.status, 200);
    assert.equal(await log.text(), "[ 1.234] test: running g\r\n", "the span of the run, not what came before");
  });

  test("the ring survives a restart: offsets go on from where they were", async () => {
    await setup();
    const before = await read("tty");
    await server.restart();
    const after = await read("tty");
    assert.equal(after.end, before.end);
    assert.equal(after.text, before.text);
  });
});
