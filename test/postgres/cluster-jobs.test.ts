/*
 * Jobs run once in a cluster: the deployments' time decisions on one node at a time, taken over
 * by another within 10 s when the holder is killed (-9) in the middle of its work, never done twice.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import pg from "pg";
import type { ClusterView } from "../../src/cluster/schema.ts";
import { startNode, type NodeProcess } from "../helpers/cluster.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { waitFor, type TestServer } from "../helpers/server.ts";
import { nextMac } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const nodes: NodeProcess[] = [];
const postgres = usePostgres({
  async teardown() {
    for (const node of nodes) await node.stop("SIGKILL");
  },
});

const holderOf = async (node: NodeProcess, job: string) => (await node.call<ClusterView>("GET", "/api/v1/cluster")).body.nodes.find((n) => n.state === "up" && (n.jobs as string[]).includes(job))?.name;

test("kill -9 of the node making the deployments' time decisions: another takes them within 10 s, every scheduled deployment starts once, none twice", async () => {
  const url = await postgres.createDatabase("jobs");
  const a = await startNode(url, "node-a");
  nodes.push(a);
  const b = await startNode(url, "node-b", { first: a });
  nodes.push(b);
  assert.equal(await holderOf(b, "deployments"), "node-a");

  const pk = await uploadOk({ request: a.request } as TestServer, { token: a.adminToken, version: "v2" });
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    const count = 10;
    const base = Date.now() + 4000;
    const deployments: Array<{ id: number; startAt: number }> = [];
    for (let i = 0; i < count; i++) {
      const mac = nextMac();
      const device = await db.query<{ id: number }>(`INSERT INTO devices (created, name, mac_address, capabilities, metadata, last_access) VALUES ($1, $2, $2, '{}', '{}', $1) RETURNING id`, ["2020-01-01T00:00:00.000Z", mac]);
      const group = (await b.call<{ id: number }>("POST", "/api/v2/groups", { metadata: {} })).body.id;
      assert.equal((await b.call("POST", `/api/v2/groups/${group}/package`, { packages: [pk.id] })).status, 200);
      assert.equal((await b.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [Number(device.rows[0].id)], remove: [] })).status, 200);
      // Made through the node that does not decide: the one that does learns of it from the database.
      const startAt = base + i * 1500;
      const created = await b.call<{ id: number; status: string }>("POST", "/api/v2/deployments", { group, version: "v2", start_at: new Date(startAt).toISOString() });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      deployments.push({ id: created.body.id, startAt });
    }
    const status = async (id: number) => (await b.call<{ status: string; started: string | null }>("GET", `/api/v2/deployments/${id}`)).body;
    // Node a starts the first ones; it is killed while it still has more to start.
    await waitFor(async () => (await status(deployments[3].id)).status === "running", 20_000, "node a starting the first deployments");
    a.child.kill("SIGKILL");
    const killedAt = Date.now();
    await waitFor(async () => (await holderOf(b, "deployments")) === "node-b", 10_000, "node b taking the deployments over");
    assert.ok(Date.now() - killedAt < 10_000, `taken over after ${Date.now() - killedAt} ms`);

    const last = deployments[count - 1];
    await waitFor(async () => (await status(last.id)).status === "running", last.startAt - Date.now() + 12_000, "the last deployment started");
    for (const { id, startAt } of deployments) {
      const view = await status(id);
      assert.equal(view.status, "running", `deployment ${id}`);
      const late = Date.parse(view.started!) - startAt;
      assert.ok(late < 10_000, `deployment ${id} started ${late} ms after its start time`);
    }
    const starts = await db.query<{ target: string; n: number }>(`SELECT target, count(*)::int AS n FROM audit_log WHERE action = 'deployment.start' GROUP BY target ORDER BY target`);
    assert.deepEqual(
      starts.rows.map((r) => [r.target, r.n]),
      deployments.map((d) => [`deployment:${d.id}`, 1]).sort(),
      "each started exactly once",
    );
  } finally {
    await db.end();
  }
});

test("a node started again under its name takes its place at once, though the process before it still holds its session (hung): that one's jobs are free at once, and it leaves when it wakes", async () => {
  const url = await postgres.createDatabase("takeover");
  const a = await startNode(url, "node-a");
  nodes.push(a);
  const b = await startNode(url, "node-b", { first: a });
  nodes.push(b);
  assert.equal(await holderOf(b, "deployments"), "node-a");
  // The hung process holds the sweep of silent nodes too, so no sweep can free its jobs: only the restart under its name can.
  assert.equal(await holderOf(b, "node_sweep"), "node-a");
  a.child.kill("SIGSTOP");
  const again = await startNode(url, "node-a", { first: a });
  nodes.push(again);
  const view = async () => (await b.call<ClusterView>("GET", "/api/v1/cluster")).body.nodes;
  assert.deepEqual((await view()).find((n) => n.name === "node-a")?.advertise_url, `http://127.0.0.1:${again.port}`);
  // Its jobs are held again, each by one node, within a few beats of the new process's start.
  await waitFor(async () => (await view()).flatMap((n) => n.jobs).length === 5, 15_000, "the jobs held again");
  const jobs = (await view()).flatMap((n) => n.jobs);
  assert.equal(new Set(jobs).size, 5);

  a.child.kill("SIGCONT");
  await waitFor(() => /another process took the node name node-a/.test(a.stdout() + a.stderr()), 10_000, "the woken process leaving");
  assert.equal((await view()).find((n) => n.name === "node-a")?.state, "up");
  assert.equal((await view()).flatMap((n) => n.jobs).length, 5);
});
