/*
 * Devices connect to any node: three nodes on one throwaway PostgreSQL, an agent on each. An
 * action, a shell and a file fetch on the device of node 1 asked through node 2; a fan-out from
 * node 3 reaches the devices of all three; node 2's event stream carries node 1's events.
 */
import assert from "node:assert/strict";
import { cpSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import WebSocket from "ws";
import type { Agent } from "../../src/agent/agent.ts";
import { KEYS_DIR } from "../../src/auth/keys.ts";
import { freePort } from "../helpers/cluster.ts";
import { openStream } from "../helpers/events.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { approveAgent, device, FAST_SERVER, startAgent } from "../update/helpers/agents.ts";

const nodes: TestServer[] = [];
const agents: Agent[] = [];
usePostgres({
  async setup(postgres) {
    const url = await postgres.createDatabase("devices");
    for (const name of ["node-1", "node-2", "node-3"]) {
      const dataDir = tempDir();
      if (nodes[0]) cpSync(join(nodes[0].dataDir, KEYS_DIR), join(dataDir, KEYS_DIR), { recursive: true });
      const port = await freePort();
      nodes.push(
        await startTestServer({ ...FAST_SERVER, listen: { host: "127.0.0.1", port }, database: { url }, cluster: { node_name: name, advertise_url: `http://127.0.0.1:${port}` } }, dataDir),
      );
    }
  },
  async teardown() {
    for (const agent of agents) await agent.stop();
    for (const node of nodes) await node.close();
  },
});

/** An agent on `node`, approved there, seen connected from every node. */
async function agentOn(node: TestServer): Promise<{ agent: Agent & { dir: string }; id: number }> {
  const agent = startAgent(node, { shell: { command: ["sh"], idle_timeout: 30 } });
  agents.push(agent);
  const id = await approveAgent(node, agent);
  for (const other of nodes) await waitFor(async () => (await device(other, id)).connected, 5000, `device ${id} connected, seen from ${other.url}`);
  return { agent, id };
}

test("a device on node 1 runs an action, a shell and a file fetch asked through node 2; a fan-out from node 3 reaches the devices of all three; node 2's stream carries node 1's events", async () => {
  const [one, two, three] = nodes;
  const stream = await openStream(two);
  const first = await agentOn(one);
  await stream.next((e) => e.event === "connect" && e.data.device === first.agent.mac, 5000, "node 1's connect event on node 2's stream");
  const others = [await agentOn(two), await agentOn(three)];

  // An action.
  const ran = await two.call<{ status_code: number; output: string }>("GET", `/api/v2/devices/${first.agent.mac}/action/exec/ok`);
  assert.equal(ran.status, 200, JSON.stringify(ran.body));
  assert.deepEqual([ran.body.status_code, Buffer.from(ran.body.output, "base64").toString()], [0, "fine\n"]);
  const log = await one.call<Array<{ action: string; status: string }>>("GET", `/api/v2/devices/${first.agent.mac}/action/log`);
  assert.deepEqual(log.body.map((e) => [e.action, e.status]), [["ok", "success"]], "logged once");

  // A shell: bytes both ways through node 2, its end closes the manager's socket.
  const ws = new WebSocket(`${two.url.replace("http", "ws")}/api/v1/devices/${first.agent.mac}/shell`, { headers: { authorization: `Bearer token=${two.adminToken}` } });
  let text = "";
  ws.on("message", (data) => (text += data.toString()));
  const closed = new Promise<number>((resolve) => ws.once("close", (code) => resolve(code)));
  await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
  ws.send("echo through-node-2\nexit\n");
  assert.equal(await closed, 1000, `closed after ${JSON.stringify(text)}`);
  assert.match(text, /through-node-2\n/);

  // A file fetch: the file is assembled on node 1, whose link it is.
  writeFileSync(join(first.agent.config.file_base_dir, "boot.log"), "booted\n");
  const fetched = await two.call<{ status: number; url: string }>("POST", `/api/v2/devices/${first.id}/fs/file`, { file: join(first.agent.config.file_base_dir, "boot.log") });
  assert.equal(fetched.status, 200, JSON.stringify(fetched.body));
  assert.equal(fetched.body.status, 0);
  assert.ok(fetched.body.url.startsWith(one.url), fetched.body.url);
  assert.equal(await (await fetch(fetched.body.url)).text(), "booted\n");

  // A fan-out from node 3.
  const macs = [first.agent.mac, ...others.map((o) => o.agent.mac)];
  const fanOut = await three.call<{ results: Array<{ device: string; status: number; output?: string }> }>("POST", "/api/v2/devices/action/exec", { action_id: "ok", devices: macs });
  assert.equal(fanOut.status, 200);
  assert.deepEqual(
    fanOut.body.results.map((r) => [r.device, r.status, Buffer.from(r.output ?? "", "base64").toString()]),
    macs.map((mac) => [mac, 200, "fine\n"]),
  );
  stream.close();
});
