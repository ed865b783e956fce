/*
 * Agents that know every node (`server:` as a list), real `labgate agent` processes on three
 * real nodes: kill -9 of the node they are on (they move within 15 s, a running deployment
 * completes, no acknowledged write is lost, a shell through that node ends with a clear close
 * code), and a rolling restart of every node with update checks running (none fails).
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import WebSocket from "ws";
import type { ClusterView } from "../../src/cluster/schema.ts";
import { startNode, type NodeProcess } from "../helpers/cluster.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { untilDeployment } from "../helpers/events.ts";
import { spawnConnectedAgent, type AgentProcess } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";

type Node = NodeProcess & { adminToken: string };
const nodes: Node[] = [];
const agents: AgentProcess[] = [];
const postgres = usePostgres({
  async teardown() {
    for (const agent of agents) agent.child.kill("SIGKILL");
    for (const node of nodes) await node.stop("SIGKILL");
  },
});

const asServer = (node: NodeProcess) => node as unknown as TestServer;

/** Three nodes on a new database, sharing one package directory. */
async function threeNodes(database: string): Promise<{ url: string; nodes: Node[]; config: string[] }> {
  const url = await postgres.createDatabase(database);
  const config = ["storage:", "  driver: local", "  local:", `    dir: ${tempDir("labgate-shared-storage-")}`];
  const one = await startNode(url, "node-1", { config });
  const started = [one, await startNode(url, "node-2", { first: one, config }), await startNode(url, "node-3", { first: one, config })];
  nodes.push(...started.slice(1));
  nodes.unshift(one);
  return { url, nodes: started, config };
}

/** An agent process on `list[0]` that knows every node of `list`, in that order. */
async function agentOf(list: NodeProcess[], extra: string[] = []): Promise<AgentProcess & { id: number }> {
  const agent = await spawnConnectedAgent(asServer(list[0]), ["server:", ...list.map((node) => `  - ${node.url}`), ...extra]);
  agents.push(agent);
  return agent;
}

const clusterView = async (node: NodeProcess) => (await node.call<ClusterView>("GET", "/api/v1/cluster")).body;
/** Device sockets per node, as `node` sees them (only nodes that are up). */
const socketsPerNode = async (node: NodeProcess) => Object.fromEntries((await clusterView(node)).nodes.filter((n) => n.state === "up").map((n) => [n.name, n.connected_devices]));

test("kill -9 of the node the agents are on: each is on another node within 15 s, the running deployment completes, no acknowledged write is lost, and a shell through that node ends with 1011 naming it", async () => {
  const { nodes: [one, two, three] } = await threeNodes("failover");
  const install = `install_command: ["sh", "-c", "sleep 2"]`;
  const fleet: Array<AgentProcess & { id: number }> = [];
  for (let i = 0; i < 4; i++) fleet.push(await agentOf([one, two, three], ["device_type: board", "software_version: v1", "update_check_interval: 0.5", install, "shell:", "  command: [sh]"]));
  assert.deepEqual(await socketsPerNode(two), { "node-1": 4, "node-2": 0, "node-3": 0 });

  // A shell on node 1's device, asked through node 2 (which relays it to node 1).
  const shell = new WebSocket(`${two.url.replace("http", "ws")}/api/v1/devices/${fleet[0].mac}/shell`, { headers: { authorization: `Bearer token=${two.adminToken}` } });
  let output = "";
  shell.on("message", (data) => (output += data.toString()));
  const shellClosed = new Promise<{ code: number; reason: string }>((resolve) => shell.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise((resolve, reject) => (shell.once("open", resolve), shell.once("error", reject)));
  shell.send("echo before-the-kill\n");
  await waitFor(() => output.includes("before-the-kill\n"), 10_000, "the shell's output");

  // A deployment, made through node 2 (node 1, where the agents check, learns of its groups' writes from the database), running while node 1 goes.
  const pkg = await uploadOk(asServer(one), { token: one.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
  const group = (await two.call<{ id: number }>("POST", "/api/v2/groups", { metadata: { name: "boards" } })).body.id;
  assert.equal((await two.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await two.call("PATCH", `/api/v2/groups/${group}/devices`, { add: fleet.map((a) => a.id), remove: [] })).status, 200);
  const deployment = await two.call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2", success_percent: 100, retries: 1 });
  assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
  await untilDeployment(asServer(two), deployment.body.id, (view: { status: string; counts: Record<string, number> }) => view.status === "running" && (view.counts.downloading ?? 0) + (view.counts.installing ?? 0) > 0, 30_000, "installs under way");

  // Writes to node 1 until it dies: each it acknowledged must be there afterwards.
  const acknowledged: number[] = [];
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing; i++) {
      const res = await one.call<{ id: number }>("POST", "/api/v2/groups", { metadata: { name: `written-${i}` } }).catch(() => undefined);
      if (!res) return;
      if (res.status === 200) acknowledged.push(res.body.id);
    }
  })();
  await waitFor(() => acknowledged.length >= 5, 10_000, "writes acknowledged by node 1");
  one.child.kill("SIGKILL");
  const killedAt = Date.now();
  await writer;
  writing = false;

  await waitFor(async () => {
    const sockets = await socketsPerNode(two);
    return sockets["node-1"] === undefined && (sockets["node-2"] ?? 0) + (sockets["node-3"] ?? 0) === 4;
  }, 15_000, "every agent connected to node 2 or node 3");
  const movedAfter = Date.now() - killedAt;
  assert.ok(movedAfter < 15_000, `moved after ${movedAfter} ms`);

  const closed = await shellClosed;
  assert.equal(closed.code, 1011);
  assert.match(closed.reason, /node node-1, which (holds|held) the device's socket, went away/);

  const done = await untilDeployment(asServer(two), deployment.body.id, (view: { status: string }) => view.status !== "running", 60_000, "the deployment ending");
  assert.equal((done as { status: string }).status, "completed", JSON.stringify(done));
  for (const id of acknowledged) assert.equal((await three.call("GET", `/api/v2/groups/${id}`)).status, 200, `group ${id}, acknowledged by node 1`);
});

test("a rolling restart of every node with update checks running: no agent's check fails, each moved off its node when that node went and back once it answered", async () => {
  const { url, nodes: started, config } = await threeNodes("rolling");
  const ring = (i: number) => [0, 1, 2].map((k) => started[(i + k) % 3]);
  const fleet: AgentProcess[] = [];
  for (let i = 0; i < 3; i++) fleet.push(await agentOf(ring(i), ["update_check_interval: 0.2", "log_level: info"]));
  const live = [...started];
  for (const [i, node] of started.entries()) {
    assert.equal(await node.stop("SIGTERM"), 0);
    const again = await startNode(url, node.name, { first: i === 0 ? undefined : started[0], joined: true, dataDir: node.dataDir, port: node.port, config });
    nodes.push(again);
    live[i] = again;
    // Every agent is connected again before the next node goes.
    await waitFor(async () => Object.values(await socketsPerNode(live[(i + 1) % 3])).reduce((a, b) => a + b, 0) === 3, 15_000, `the agents connected after ${node.name}'s restart`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  // Each agent went back to the first node of its list once that node answered again.
  await waitFor(async () => JSON.stringify(await socketsPerNode(live[0])) === JSON.stringify({ "node-1": 1, "node-2": 1, "node-3": 1 }), 15_000, "each agent back on its first node");
  for (const agent of fleet) {
    agent.child.kill("SIGTERM");
    const log = agent.stderr();
    assert.doesNotMatch(log, /\bupdate: /, `an update check failed: ${log}`);
    assert.match(log, /agent: http:\/\/127\.0\.0\.1:\d+ failed \(.*\); using http:\/\/127\.0\.0\.1:\d+/);
    assert.match(log, /agent: http:\/\/127\.0\.0\.1:\d+ answers again; using it instead of/);
  }
});
