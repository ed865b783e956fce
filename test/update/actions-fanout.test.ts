import assert from "node:assert/strict";
import { test } from "node:test";
import WebSocket from "ws";
import { useTestServer } from "../helpers/server.ts";
import { FAST_SERVER } from "./helpers/agents.ts";
import { nextMac, seedDevices } from "./helpers/devices.ts";

const server = useTestServer(FAST_SERVER);

type Entry = { id: string; action: string; status: string; status_code: number | null; output: string | null; download_url: string | null };
const log = async (mac: string): Promise<Entry[]> => (await (await server.request(`/api/v2/devices/${mac}/action/log`, { token: server.adminToken })).json()) as Entry[];
const fanOut = (body: unknown, token = server.adminToken) => server.request("/api/v2/devices/action/exec", { method: "POST", token, json: body });

/**
 * A device speaking the socket protocol by hand: reports the action capability, lists `hello`,
 * takes every action_exec (ok) and answers `reply(execution)`; `leave` closes the socket instead
 * of answering (after taking the action).
 */
async function simulatedDevice(device: { mac: string; token: string }, behaviour: { output?: string; leave?: boolean } = {}): Promise<WebSocket> {
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${device.token}` } });
  ws.on("message", (data) => {
    const message = JSON.parse(String(data)) as { method: string; execution_id?: string };
    if (message.method === "action_list_query") ws.send(JSON.stringify({ method: "action_list_update", actions: [{ id: "hello", command: ["true"], timeout: 5 }] }));
    if (message.method !== "action_exec") return;
    ws.send(JSON.stringify({ method: "action_exec_control", execution_id: message.execution_id, status: "ok" }));
    if (behaviour.leave) return ws.close();
    const output = Buffer.from(behaviour.output ?? `hello from ${device.mac}`).toString("base64");
    ws.send(JSON.stringify({ method: "action_exec_result", execution_id: message.execution_id, status_code: 0, output }));
  });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  ws.send(JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: true } }));
  return ws;
}

test("an action on many devices in one request: every result recorded, a device gone mid-fan-out recorded as failed, offline ones queued", async () => {
  const devices = await seedDevices(server, 120);
  const [leaver, offline, big, ...answering] = devices;
  const large = "x".repeat(5000); // past what the log row keeps: stored as a file
  const sockets = await Promise.all([
    ...answering.map((d) => simulatedDevice(d)),
    simulatedDevice(leaver, { leave: true }),
    simulatedDevice(big, { output: large }),
  ]);
  try {
    const unknown = nextMac();
    const res = await fanOut({ action_id: "hello", devices: [...devices.map((d) => d.mac), unknown, answering[0].mac] });
    assert.equal(res.status, 200);
    const { results } = (await res.json()) as { results: Array<{ device: string; status: number; status_code?: number; output?: string; error?: string }> };
    // One entry per device named (the repeated one once), in the order given.
    assert.deepEqual(
      results.map((r) => r.device),
      [...devices.map((d) => d.mac), unknown],
    );
    const byMac = new Map(results.map((r) => [r.device, r]));
    for (const d of answering) assert.deepEqual(byMac.get(d.mac), { device: d.mac, status: 200, status_code: 0, output: Buffer.from(`hello from ${d.mac}`).toString("base64") });
    assert.deepEqual(byMac.get(big.mac), { device: big.mac, status: 200, status_code: 0, output: Buffer.from(large).toString("base64") });
    assert.equal(byMac.get(leaver.mac)!.status, 504);
    assert.match(byMac.get(leaver.mac)!.error!, /disconnected/);
    assert.deepEqual(byMac.get(offline.mac), { device: offline.mac, status: 202 });
    assert.deepEqual(byMac.get(unknown), { device: unknown, status: 404, error: "device does not exist" });

    // The log of every device says the same; outputs download through their links, small or large.
    for (const d of answering) {
      const [entry] = await log(d.mac);
      assert.deepEqual([entry.action, entry.status, entry.status_code, entry.output], ["hello", "success", 0, Buffer.from(`hello from ${d.mac}`).toString("base64")]);
    }
    const [small] = await log(answering[7].mac);
    const download = await fetch(small.download_url!);
    assert.equal(await download.text(), `hello from ${answering[7].mac}`);
    const partial = await fetch(small.download_url!, { headers: { range: "bytes=0-4" } });
    assert.deepEqual([partial.status, await partial.text()], [206, "hello"]);
    const [bigEntry] = await log(big.mac);
    assert.equal(await (await fetch(bigEntry.download_url!)).text(), large);
    assert.deepEqual((await log(leaver.mac)).map((e) => [e.status, e.status_code]), [["error", null]]);
    assert.deepEqual((await log(offline.mac)).map((e) => e.status), ["pending"]);
  } finally {
    for (const ws of sockets) ws.close();
  }
});

test("fan-out: bad bodies are refused whole, a caller without update on a device gets its 403 or 404 there", async () => {
  const [device] = await seedDevices(server, 1);
  for (const bad of [{}, { action_id: "x" }, { action_id: "x", devices: [] }, { action_id: "", devices: [device.mac] }, { action_id: "x", devices: [1] }, { action_id: "x", devices: [device.mac], extra: 1 }]) {
    const res = await fanOut(bad);
    assert.equal(res.status, 400, JSON.stringify(bad));
  }
  assert.deepEqual(await log(device.mac), []);

  const user = server.token([], "fanout-user");
  assert.deepEqual(await (await fanOut({ action_id: "x", devices: [device.mac] }, user)).json(), { results: [{ device: device.mac, status: 404, error: "device does not exist" }] });
  const grant = await server.request("/api/v1/permissions", { method: "POST", token: server.adminToken, json: { user_id: "fanout-user", resource: "device", resource_id: device.id, permission: "read" } });
  assert.equal(grant.status, 200);
  const [refused] = ((await (await fanOut({ action_id: "x", devices: [device.mac] }, user)).json()) as { results: Array<{ status: number }> }).results;
  assert.equal(refused.status, 403);
  assert.deepEqual(await log(device.mac), []);
  assert.equal((await fanOut({ action_id: "x", devices: [device.mac] }, "")).status, 401);
});
