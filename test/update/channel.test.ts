import assert from "node:assert/strict";
import { after, test } from "node:test";
import WebSocket from "ws";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { agentClient, approveAgent, approvedThenStopped, device, disconnecting, FAST_SERVER, startAgent, untilConnected } from "./helpers/agents.ts";
import { openStream } from "../helpers/events.ts";
import type { Agent } from "../../src/agent/agent.ts";

const agents: Agent[] = [];
// Registered first, so it runs first: the agents stop before the server closes.
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);

test("an agent registers, waits for approval, connects and reports its capabilities", async () => {
  const agent = startAgent(server, { device_type: "rpi4", software_version: "2.1", metadata: { "lab.rack": "r7", "lab.ports": ["a", "b"] } });
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  const d = await device(server, id);
  assert.deepEqual(d.capabilities, { exec_cmds: true, file_transfer: true, shell_connect: false, tests: false });
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
  await waitFor(async () => (await device(server, id)).capabilities.file_transfer === true && (await device(server, id)).capabilities.exec_cmds === false, 3000, "capabilities");
  assert.equal((await device(server, id)).connected, true);
  let code = 0;
  await disconnecting(server, agent.mac, async () => {
    code = await new Promise<number>((resolve) => {
      ws.on("close", (c) => resolve(c));
      ws.send(Buffer.from([1, 2, 3]), { binary: true });
    });
  });
  assert.equal(code, 1003);
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
  const stream = await openStream(server);
  try {
    const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` }, autoPong: false });
    const closed = new Promise<void>((resolve) => ws.on("close", () => resolve()));
    await new Promise((resolve) => ws.once("open", resolve));
    await stream.next((e) => e.event === "connect" && e.data.device === agent.mac, 3000, "connected");
    assert.equal((await device(server, id)).connected, true);
    // ping interval 1 s: dropped after the second ping finds the first unanswered.
    await stream.next((e) => e.event === "disconnect" && e.data.device === agent.mac, 4000, "dropped for silence");
    assert.equal((await device(server, id)).connected, false);
    await closed;
  } finally {
    stream.close();
  }
});

test("a server whose event loop was held drops no device whose pong waits in its socket", async () => {
  const agent = startAgent(server);
  agents.push(agent);
  const id = await approvedThenStopped(server, agent);
  const token = await (await agentClient(server, agent, 13)).getToken();
  const stream = await openStream(server);
  try {
    const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` } });
    await new Promise((resolve) => ws.once("open", resolve));
    await stream.next((e) => e.event === "connect" && e.data.device === agent.mac, 3000, "connected");
    // The pong is written before "ping" is emitted; then the whole process (the server too) is held
    // past the next round (ping interval 1 s), once 0.3 s late (judged) and once 0.8 s late.
    let held = 0;
    const closed = await new Promise<boolean>((resolve) => {
      ws.once("close", () => resolve(true));
      ws.on("ping", () => {
        if (held === 2) return resolve(false);
        const until = Date.now() + [1300, 1800][held++];
        while (Date.now() < until);
      });
    });
    assert.equal(closed, false, `the server closed the socket after ${held} held rounds`);
    // Any drop would have come in the rounds above; one more round to be sure none is pending.
    const dropped = stream.next((e) => e.event === "disconnect" && e.data.device === agent.mac, 1500, "").then(() => true, () => false);
    assert.equal(await dropped, false, "the device was dropped");
    assert.equal((await device(server, id)).connected, true);
    ws.close();
  } finally {
    stream.close();
  }
});

// Issue 10 item 5: two agents share one MAC, the second with a new key.
const actionIds = async (mac: string): Promise<string[] | undefined> => {
  const res = await server.request(`/api/v2/devices/${mac}/action/list`, { token: server.adminToken });
  return res.status === 200 ? ((await res.json()) as { action_id: string }[]).map((a) => a.action_id) : undefined;
};

test("a confirmed key change revokes the old key's tokens and socket; the agent with the new key takes over", async () => {
  const stolen = startAgent(server, { actions: [{ id: "old-key", name: "Old", command: ["true"], timeout: 5 }] });
  agents.push(stolen);
  const id = await approveAgent(server, stolen);
  await untilConnected(server, id);
  assert.deepEqual(await actionIds(stolen.mac), ["old-key", "svc.builtins.trigger_update_check"]);
  // A token of the old key, held on the side (as whoever copied the key would).
  const oldToken = (await (await agentClient(server, stolen, 30)).getToken())!;
  const check = (token: string) =>
    server.request("/api/v1/update/check", { method: "POST", token, json: { "svc.software.version": "0", "svc.hardware.devtype": "generic", "svc.hardware.macaddr": stolen.mac } });
  assert.ok([200, 204].includes((await check(oldToken)).status));

  // The real device comes back with a new key: a pending key change.
  const real = startAgent(server, { mac_address: stolen.mac, actions: [{ id: "new-key", name: "New", command: ["true"], timeout: 5 }] });
  agents.push(real);
  const pending = await waitFor(async () => {
    const list = (await (await server.request("/api/v1/auth/pending?details=true", { token: server.adminToken })).json()) as Array<{ mac_address: string; public_key: string; key_change: boolean }>;
    return list.find((p) => p.mac_address === real.mac && p.key_change);
  }, 5000, "the key change request");
  const approve = await server.request("/api/v1/auth/register", {
    method: "POST",
    token: server.adminToken,
    json: { mac_address: pending.mac_address, public_key: pending.public_key, confirm_key_change: true },
  });
  assert.equal(approve.status, 200);

  // At once: the old key's token is refused...
  const refused = await check(oldToken);
  assert.equal(refused.status, 401);
  // ...and the device that connects is the one with the new key (not refused as a duplicate).
  await real.approved;
  await waitFor(async () => (await actionIds(real.mac))?.includes("new-key"), 10_000, "the new key's socket");
  assert.equal((await device(server, id)).connected, true);
  // The old key is a pending registration again, not a device.
  await waitFor(async () => {
    const list = (await (await server.request("/api/v1/auth/pending?details=true", { token: server.adminToken })).json()) as Array<{ mac_address: string; key_change: boolean }>;
    return list.some((p) => p.mac_address === real.mac && p.key_change);
  }, 5000, "the old key asking again");
  assert.deepEqual(await actionIds(real.mac), ["new-key", "svc.builtins.trigger_update_check"], "still the new key's socket");
});
