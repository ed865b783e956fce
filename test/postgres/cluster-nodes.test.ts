import { strict as assert } from "node:assert";
import { test } from "node:test";
import { ClusterView } from "../../src/cluster/schema.ts";
import { inProcessNode as node } from "../helpers/cluster.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { exact } from "../helpers/shapes.ts";
import { startTestServer, waitFor, type TestServer } from "../helpers/server.ts";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { registerDevice } from "../update/helpers/devices.ts";

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

test("on the embedded database the cluster is this one node, running every job", async () => {
  const server = await startTestServer({ database: { url: "" }, cluster: { node_name: "solo", advertise_url: "" } });
  try {
    assert.deepEqual(await cluster(server), { nodes: [{ name: "solo", advertise_url: "", state: "up", connected_devices: 0, jobs: ["deployments", "audit_retention", "progress_expiry", "test_runs", "node_sweep"] }] });
  } finally {
    await server.close();
  }
});
