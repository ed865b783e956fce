import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import WebSocket from "ws";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { agentClient, approveAgent, approvedThenStopped, device, FAST_SERVER, startAgent, until, untilConnected } from "./helpers/agents.ts";
import type { Agent } from "../../src/agent/agent.ts";

let server: TestServer;
const agents: Agent[] = [];

before(async () => {
  server = await startTestServer(FAST_SERVER);
});
after(async () => {
  for (const agent of agents) await agent.stop();
  await server.close();
});

test("an agent registers, waits for approval, connects and reports its capabilities", async () => {
  const agent = startAgent(server, { device_type: "rpi4", software_version: "2.1", metadata: { "lab.rack": "r7", "lab.ports": ["a", "b"] } });
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  const d = await device(server, id);
  assert.deepEqual(d.capabilities, { exec_cmds: true, file_transfer: true, shell_connect: false });
  assert.equal(d.metadata["svc.hardware.macaddr"], agent.mac);
  // contract.md, the device agent: device_type, software_version and metadata are reported.
  assert.equal(d.metadata["svc.hardware.devtype"], "rpi4");
  assert.equal(d.metadata["svc.software.version"], "2.1");
  assert.equal(d.metadata["lab.rack"], "r7");
  assert.deepEqual(d.metadata["lab.ports"], ["a", "b"]);
});

test("the device socket refuses a missing or management token with 401, before any upgrade", async () => {
  for (const headers of [{}, { authorization: `Bearer token=${server.adminToken}` }]) {
    const status = await new Promise<number>((resolve, reject) => {
      const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers });
      ws.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
      ws.on("open", () => reject(new Error("upgraded")));
      ws.on("error", () => {});
    });
    assert.equal(status, 401);
  }
});

test("a second socket for the same device is closed with 4002 and the first stays", async () => {
  const agent = startAgent(server);
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  // Same device, same key: a second connection.
  const client = await agentClient(server, agent, 7);
  const token = await client.getToken();
  assert.ok(token);
  const closed = await new Promise<{ code: number; reason: string }>((resolve) => {
    const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` } });
    ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() }));
    ws.on("error", () => {});
  });
  assert.deepEqual(closed, { code: 4002, reason: "duplicate connections not allowed" });
  // A plain GET (no upgrade) is told what the route wants.
  const plain = await client.request("/api/v1/devices/ws");
  assert.equal(plain.status, 426);
  assert.equal((await device(server, id)).connected, true);
  assert.equal(agent.connected, true);
});

test("unknown methods, malformed messages and device alerts are ignored, binary frames close with 1003", async () => {
  const agent = startAgent(server);
  agents.push(agent);
  const id = await approvedThenStopped(server, agent);
  const client = await agentClient(server, agent, 7);
  const token = await client.getToken();
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` } });
  const welcome = await new Promise<string>((resolve) => ws.once("message", (data) => resolve(data.toString())));
  assert.deepEqual(JSON.parse(welcome), { method: "alert", alert: { message: "connected" } });
  ws.send("not json");
  ws.send("{}");
  ws.send(JSON.stringify({ method: "no_such_method" }));
  ws.send(JSON.stringify({ method: "alert", alert: { error: "Device cannot handle request" } }));
  ws.send(JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: false, file_transfer: true } }));
  await until(async () => (await device(server, id)).capabilities.file_transfer === true && (await device(server, id)).capabilities.exec_cmds === false, 3000, "capabilities");
  assert.equal((await device(server, id)).connected, true);
  const code = await new Promise<number>((resolve) => {
    ws.on("close", (c) => resolve(c));
    ws.send(Buffer.from([1, 2, 3]), { binary: true });
  });
  assert.equal(code, 1003);
  await until(async () => !(await device(server, id)).connected, 3000, "disconnect after binary frame");
  // Capabilities stay after the disconnect (7.1).
  assert.equal((await device(server, id)).capabilities.file_transfer, true);
});

test("a device that stops answering pings is dropped", async () => {
  const agent = startAgent(server);
  agents.push(agent);
  const id = await approvedThenStopped(server, agent);
  const client = await agentClient(server, agent, 13);
  const token = await client.getToken();
  // A client that never answers pings (a half-open connection, seen from the server).
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` }, autoPong: false });
  const closed = new Promise<void>((resolve) => ws.on("close", () => resolve()));
  await new Promise((resolve) => ws.once("open", resolve));
  await until(async () => (await device(server, id)).connected, 3000, "connected");
  // ping interval 1 s: dropped after the second ping finds the first unanswered.
  await until(async () => !(await device(server, id)).connected, 4000, "dropped for silence");
  await closed;
});
