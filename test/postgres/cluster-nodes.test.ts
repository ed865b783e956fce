import { strict as assert } from "node:assert";
import { test } from "node:test";
import { ClusterView } from "../../src/cluster/schema.ts";
import { inProcessNode as node } from "../helpers/cluster.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { exact } from "../helpers/shapes.ts";
import { startTestServer, waitFor, type TestServer } from "../helpers/server.ts";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { registerDevice, seedDevices } from "../update/helpers/devices.ts";
import { device } from "../update/helpers/agents.ts";
import { startOldNode, type OldNode } from "../fixtures/cluster-node-v1.ts";

/** pg's warnings in this process (each is emitted once a process, so the listener is on from the start). */
const pgWarnings: string[] = [];
process.on("warning", (warning) => {
  if (/pg@9|client\.query\(\)/.test(warning.message)) pgWarnings.push(warning.message);
});

const postgres = usePostgres();

const cluster = async (server: TestServer, token = server.adminToken) => (await server.call<ClusterView>("GET", "/api/v1/cluster", undefined, token)).body;
const byName = (view: ClusterView) => Object.fromEntries(view.nodes.map((n) => [n.name, n]));

test("two nodes on one PostgreSQL: each lists both, the devices each holds and its jobs (admin_ro only); a stopped node says so, its jobs go to the other, and a restart under its name takes its place", async () => {
  const url = await postgres.createDatabase("nodes");
  const a = await node(url, "node-a");
  const b = await node(url, "node-b", a.dataDir);
  try {
    const view = await cluster(b, a.adminToken);
    exact(ClusterView, view, "GET /api/v1/cluster");
    assert.deepEqual(view.nodes.map((n) => [n.name, n.advertise_url, n.state]), [
      ["node-a", "http://node-a.invalid:5000", "up"],
      ["node-b", "http://node-b.invalid:5000", "up"],
    ]);
    // Each job on exactly one node; the first node took them all.
    assert.deepEqual(byName(view)["node-a"].jobs, ["deployments", "audit_retention", "progress_expiry", "test_runs", "node_sweep"]);
    assert.deepEqual(byName(view)["node-b"].jobs, []);
    assert.equal((await b.call("GET", "/api/v1/cluster", undefined, b.token(["tests_rw"]))).status, 403);
    assert.equal((await b.call("GET", "/api/v1/cluster", undefined, b.token(["admin_ro"]))).status, 200);

    // A device connected to node a counts there, seen from node b.
    const { token } = await registerDevice(a);
    const socket = await openDeviceSocket(a.url, token);
    await waitFor(async () => byName(await cluster(b))["node-a"].connected_devices === 1, 5000, "node a's device seen from node b");
    assert.equal(byName(await cluster(b))["node-b"].connected_devices, 0);
    socket.ws.close();
    await waitFor(async () => byName(await cluster(b))["node-a"].connected_devices === 0, 5000, "node a's device gone");

    // Node a stops: it says so at once, and node b takes its jobs within a beat.
    const aDir = a.dataDir;
    await a.close();
    assert.equal(byName(await cluster(b))["node-a"].state, "stopped");
    await waitFor(async () => byName(await cluster(b))["node-b"].jobs.length === 5, 5000, "node b taking the jobs");

    // Started again under its name, node a is up at once (the jobs stay where they are).
    const again = await node(url, "node-a", undefined, aDir);
    try {
      const now = byName(await cluster(again));
      assert.equal(now["node-a"].state, "up");
      assert.deepEqual(now["node-a"].jobs, []);
      assert.equal(now["node-b"].jobs.length, 5);
    } finally {
      await again.close();
    }
  } finally {
    await b.close();
    await a.close().catch(() => {});
  }
});

test("a node's own session sends one query at a time while it beats, records a burst of device sockets, notifies and answers the view (pg deprecates overlapping queries; pg 9 refuses them)", async () => {
  const url = await postgres.createDatabase("one-query");
  const a = await node(url, "node-a");
  const b = await node(url, "node-b", a.dataDir);
  try {
    const devices = await seedDevices(a, 100);
    const sockets = await Promise.all(devices.map((device) => openDeviceSocket(a.url, device.token)));
    const views = Promise.all(Array.from({ length: 10 }, () => cluster(a)));
    await waitFor(async () => byName(await cluster(b))["node-a"].connected_devices === 100, 10_000, "node a's devices seen from node b");
    await views;
    for (const socket of sockets) socket.ws.close();
    await Promise.all(Array.from({ length: 10 }, () => cluster(a)));
    await waitFor(async () => byName(await cluster(b))["node-a"].connected_devices === 0, 10_000, "node a's devices gone");
    assert.deepEqual(pgWarnings, []);
  } finally {
    await b.close();
    await a.close();
  }
});

/** Resolves once `node` has beaten after `since` (database clock): that beat read every node's row, message formats included. */
const beatAfter = async (old: OldNode, node: string, since: number) => waitFor(async () => (await old.beatOf(node)) > since, 10_000, `a beat of ${node}`);

test("during a rolling upgrade a node of the build before (one message a NOTIFY) and a node of this one understand each other; once the old node stops, messages go as lists again", async () => {
  const url = await postgres.createDatabase("two-builds");
  const a = await node(url, "node-a");
  const old = await startOldNode(url, "node-old");
  try {
    await beatAfter(old, "node-a", await old.now());
    // Node a's device: the old node hears of it in the form it reads.
    const [mine, theirs] = await seedDevices(a, 2);
    const socket = await openDeviceSocket(a.url, mine.token);
    await waitFor(async () => old.understood.some((m) => m.topic === "presence" && (m.opened as string[]).includes(mine.mac)), 10_000, "the old node hearing of node a's device");
    assert.deepEqual(old.lost, []);
    // The old node's device, in the old form: connected on node a too, then gone.
    await old.send({ topic: "presence", node: "node-old", opened: [theirs.mac], closed: [] });
    await waitFor(async () => (await device(a, theirs.id)).connected, 10_000, "the old node's device connected, seen from node a");
    await old.send({ topic: "presence", node: "node-old", opened: [], closed: [theirs.mac] });
    await waitFor(async () => !(await device(a, theirs.id)).connected, 10_000, "the old node's device gone, seen from node a");

    // The old node leaves (upgraded): node a packs its messages again, which that build could not read.
    await old.stop();
    await beatAfter(old, "node-a", await old.now());
    socket.ws.close();
    await waitFor(async () => old.lost.some((payload) => Array.isArray(payload) && payload.some((m: { topic?: string; closed?: string[] }) => m.topic === "presence" && m.closed?.includes(mine.mac))), 10_000, "node a's list");
  } finally {
    await old.end();
    await a.close();
  }
});

test("on the embedded database the cluster is this one node, running every job", async () => {
  const server = await startTestServer({ database: { url: "" }, cluster: { node_name: "solo", advertise_url: "" } });
  try {
    assert.deepEqual(await cluster(server), { nodes: [{ name: "solo", advertise_url: "", state: "up", connected_devices: 0, jobs: ["deployments", "audit_retention", "progress_expiry", "test_runs", "node_sweep"] }] });
  } finally {
    await server.close();
  }
});
