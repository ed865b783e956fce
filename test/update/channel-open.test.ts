import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { headFirstWebSocket, type RawFrame } from "../helpers/raw.ts";
import { seedDevices } from "./helpers/devices.ts";
import { FAST_SERVER } from "./helpers/agents.ts";

// Frames a route sends as its socket opens (a refused shell's close, a device's first message)
// reach a client that takes the handshake answer in a read of its own and keeps nothing after it.
const server = useTestServer(FAST_SERVER);
const ROUNDS = 200;

const text = (frame: RawFrame | undefined) => (frame?.kind === "text" ? frame.data.toString() : JSON.stringify(frame));
const close = (frame: RawFrame | undefined) => (frame?.kind === "close" ? { code: frame.code, reason: frame.reason } : frame);

/** Opens ROUNDS shell sockets to `mac`, one after another, and asserts each is closed as `expected`. */
async function refusedShells(mac: string, expected: { code: number; reason: string }): Promise<void> {
  for (let i = 0; i < ROUNDS; i++) {
    const ws = await headFirstWebSocket(server.url, `/api/v1/devices/${mac}/shell?token=${server.adminToken}`);
    assert.deepEqual(close(await ws.next()), expected, `shell socket ${i} to ${mac}`);
    assert.equal(await ws.next(), undefined, `shell socket ${i} to ${mac} ends after its close`);
  }
}

test("a shell socket to an unknown device is seen closed with 4001, each of 200 in a row", async () => {
  await refusedShells("00:00:00:00:0e:01", { code: 4001, reason: "device 00:00:00:00:0e:01 not connected to the management WS" });
});

test("a shell socket to a device without the shell capability is seen closed with 4003, each of 200 in a row", async () => {
  const [device] = await seedDevices(server, 1);
  const ws = await headFirstWebSocket(server.url, "/api/v1/devices/ws", { authorization: `Bearer token=${device.token}` });
  assert.deepEqual(JSON.parse(text(await ws.next())), { method: "alert", alert: { message: "connected" } });
  ws.send(JSON.stringify({ method: "capability_report", capabilities: { shell_connect: false, exec_cmds: true } }));
  await refusedShells(device.mac, { code: 4003, reason: "shell attach request failed: device does not support the required method: shell_attach" });
  ws.end();
});

test("each of 200 devices that connect gets its first message, the server's alert", async () => {
  for (const [i, device] of (await seedDevices(server, ROUNDS)).entries()) {
    const ws = await headFirstWebSocket(server.url, "/api/v1/devices/ws", { authorization: `Bearer token=${device.token}` });
    assert.deepEqual(JSON.parse(text(await ws.next())), { method: "alert", alert: { message: "connected" } }, `device ${i}`);
    ws.end();
    assert.deepEqual(close(await ws.next()), { code: 1000, reason: "" }, `device ${i} closes`);
  }
});
