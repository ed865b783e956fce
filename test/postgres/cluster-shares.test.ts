/*
 * Device runs whose share goes through another node, with real `labgate agent` processes, three
 * `labgate serve` nodes on one throwaway PostgreSQL and Debian's pdudaemon: behind a load
 * balancer that puts the device's socket on node 1 and its requests on node 3, a run made on
 * node 2 gets its artifacts and its `power` module through node 3 (and so does a run made on node
 * 1); kill -9 of the node relaying a share ends that share within seconds naming the node, and the
 * device, reconnected to another node, runs the next one; kill -9 of a run's node stops its share
 * on the device through the relay.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startNode, type NodeProcess } from "../helpers/cluster.ts";
import { startPostgres, type ThrowawayPostgres } from "../helpers/postgres.ts";
import { tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { startPdudaemon, type Pdudaemon } from "../lab/helpers.ts";
import { reportRows, uploadConfig, waitRun, type RunObject } from "../testrun/run-helpers.ts";
import { device, spawnConnectedAgent, type AgentProcess } from "../update/helpers/agents.ts";
import { startProxy } from "../update/helpers/proxy.ts";

type Node = NodeProcess & { adminToken: string };
let postgres: ThrowawayPostgres;
let pdu: Pdudaemon;
const nodes: Node[] = [];
const agents: AgentProcess[] = [];
const closers: Array<() => Promise<void>> = [];
const BOARD = "share-board";
const OTHER = "share-other";
const THIRD = "share-third";

before(async () => {
  postgres = await startPostgres();
  pdu = await startPdudaemon();
  const url = await postgres.createDatabase("shares");
  const config = [
    "lab:",
    "  boards:",
    `    - {device: ${BOARD}, power: {driver: pdudaemon, url: "${pdu.url}", hostname: pdu1, port: 4, delay: 0}}`,
    // Far beyond the tests' waits: a share that ends did not end by this bound.
    "test_server: {device_wait: 15, remote_run_timeout: 600}",
  ];
  const one = await startNode(url, "node-1", { config });
  nodes.push(one, await startNode(url, "node-2", { first: one, config }), await startNode(url, "node-3", { first: one, config }));
});
after(async () => {
  for (const agent of agents) agent.child.kill("SIGKILL");
  for (const close of closers) await close();
  for (const node of nodes) await node.stop("SIGKILL");
  pdu?.close();
  await postgres?.stop();
});

const asServer = (node: NodeProcess) => node as unknown as TestServer;
const config = (node: Node, name: string, board: string, entries: string[]) =>
  uploadConfig(asServer(node), name, ["tests:", "  g:", `    machines: ["device:${board}"]`, "    tests:", ...entries.map((e) => `    ${e}`), ""].join("\n"));
async function start(node: Node, name: string): Promise<string> {
  const res = await node.call("POST", "/api/v1/test-runs", { config_name: name });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.id as string;
}
const shareOf = (run: RunObject) => (run.devices as Array<{ status: string; error: string | null; passed: number; failed: number }>)[0]!;

test("behind a balancer that sends the device's socket to node 1 and its requests to node 3: a run made on node 2 (and one made on node 1) gets its artifacts and its power module through node 3", async () => {
  const [one, two, three] = nodes;
  const balancer = await startProxy(three.url, { upgrades: one.url });
  closers.push(balancer.close);
  const agent = await spawnConnectedAgent(asServer(one), [`server: ${balancer.url}`, `name: ${BOARD}`, "tests: {enabled: true, max_duration: 120}"]);
  agents.push(agent);
  await waitFor(async () => (await device(asServer(two), agent.id)).connected, 10_000, "the device connected, seen from node 2");

  // 300 KB, so that the upload streams through node 3 and node 1 in many chunks.
  const make = "head -c 300000 /dev/urandom | od -An -tx1 | head -c 300000 > big.txt; echo through > through.txt; echo written";
  for (const [node, name] of [[two, "relayed.yml"], [one, "local.yml"]] as const) {
    await config(node, name, BOARD, ["- power: {action: cycle, wait: 0.2}", `- exec: {name: make, command: [sh, -c, '${make}'], stdout_contains: written}`]);
    const asked = pdu.asked().length;
    const id = await start(node, name);
    const run = await waitRun(asServer(node), id, undefined, 60_000);
    assert.equal(run.status, "finished", JSON.stringify(run));
    const rows = await reportRows(asServer(node), id);
    assert.ok(rows.length >= 3 && rows.every((r) => r.status === "passed"), JSON.stringify(rows));
    assert.ok(rows.some((r) => r["test name"]?.startsWith("power[")), JSON.stringify(rows));
    assert.deepEqual(pdu.asked().slice(asked), ["4 off", "4 on"], "pdudaemon's cycle of port 4, asked by the run's node");
    const audit = await node.call<Array<{ actor: string; target: string }>>("GET", "/api/v1/audit?action=power.cycle");
    assert.equal(audit.status, 200);
    assert.deepEqual([audit.body[0]?.actor, audit.body[0]?.target], ["admin", `device:${agent.id}`], "audited as the run's caller");

    const through = await node.request(`/api/v1/test-runs/${id}/artifacts/${BOARD}/through.txt`, { token: node.adminToken });
    assert.equal(await through.text(), "through\n");
    const big = await node.request(`/api/v1/test-runs/${id}/artifacts/${BOARD}/big.txt`, { token: node.adminToken });
    assert.equal((await big.arrayBuffer()).byteLength, 300_000);
    // Every request of the device went to node 3, which ran nothing of it.
    const paths = balancer.seen.filter((r) => r.path.includes(`/test-runs/${id}/`)).map((r) => `${r.method} ${r.path.replace(/\?.*/, "")}`);
    assert.ok(paths.includes(`POST /api/v1/devices/test-runs/${id}/power`), JSON.stringify(paths));
    assert.ok(paths.includes(`PUT /api/v1/devices/test-runs/${id}/artifacts/big.txt`), JSON.stringify(paths));
    assert.equal((await three.call("GET", `/api/v1/test-runs/${id}`)).status, 200, "node 3 sees the run (one database)");
  }
});

test("kill -9 of the node relaying a share: the run's node ends that share within seconds naming the lost node (not at remote_run_timeout); the device, on another node, runs the next run", async (t) => {
  const [one, two] = nodes;
  const agent = await spawnConnectedAgent(asServer(one), ["server:", `  - ${one.url}`, `  - ${nodes[2].url}`, `name: ${OTHER}`, "tests: {enabled: true, max_duration: 300}"]);
  agents.push(agent);
  await waitFor(async () => (await device(asServer(two), agent.id)).connected, 10_000, "the device connected, seen from node 2");

  const mark = join(tempDir("labgate-share-mark-"), "began");
  await config(two, "long.yml", OTHER, [`- exec: {name: long, command: [sh, -c, 'touch ${mark}; sleep 120']}`, "- exec: {name: after, command: [true]}"]);
  const id = await start(two, "long.yml");
  await waitFor(() => existsSync(mark), 30_000, "the device running the share's first case");
  assert.equal(shareOf(await waitRun(asServer(two), id, (r) => shareOf(r).status === "running", 10_000)).status, "running");

  one.child.kill("SIGKILL");
  const killed = Date.now();
  const run = await waitRun(asServer(two), id, undefined, 60_000);
  t.diagnostic(`the share ended ${Date.now() - killed} ms after the kill`);
  assert.equal(run.status, "failed", JSON.stringify(run));
  assert.match(shareOf(run).error!, /^relay node node-1 lost: /);
  const rows = await reportRows(asServer(two), id);
  assert.ok(rows.length >= 2 && rows.every((r) => r.status === "failed" && /relay node node-1 lost/.test(r.message ?? "")), JSON.stringify(rows));

  // The device reconnects to node 3 (node 2 no longer counts the lost node's sockets): a run made on node 2 finds it there.
  await config(two, "short.yml", OTHER, ["- exec: {name: short, command: [true]}"]);
  const next = await waitRun(asServer(two), await start(two, "short.yml"), undefined, 60_000);
  assert.equal(next.status, "finished", JSON.stringify(next));
});

test("kill -9 of a run's node: the node relaying its share stops it on the device at once (the device would run on unheard until it sent something)", async () => {
  const [, two, three] = nodes;
  const agent = await spawnConnectedAgent(asServer(three), [`name: ${THIRD}`, "tests: {enabled: true, max_duration: 300}", "log_level: info"]);
  agents.push(agent);
  await waitFor(async () => (await device(asServer(two), agent.id)).connected, 10_000, "the device connected, seen from node 2");

  const mark = join(tempDir("labgate-share-mark-"), "began");
  await config(two, "quiet.yml", THIRD, [`- exec: {name: quiet, command: [sh, -c, 'touch ${mark}; sleep 120']}`]);
  const id = await start(two, "quiet.yml");
  await waitFor(() => existsSync(mark), 30_000, "the device running the share");

  two.child.kill("SIGKILL");
  await waitFor(() => new RegExp(`agent: test run ${id} \\w+: the run's node node-2 was lost`).test(agent.stderr()), 30_000, `the device stopping the share (${agent.stderr()})`);
});
