/*
 * Test runs across nodes: two nodes on one throwaway PostgreSQL, an agent on node 1. A run on
 * that device started on node 2 reaches it through node 1 (its rows, its end and its artifact
 * come back through node 1), node 1's run stream carries node 2's changes (a read-only reader
 * too), and node 2 answers the device's action list.
 */
import assert from "node:assert/strict";
import { cpSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { KEYS_DIR } from "../../src/auth/keys.ts";
import { freePort } from "../helpers/cluster.ts";
import { openStream } from "../helpers/events.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { reportRows, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { approveAgent, device, FAST_SERVER, startAgent } from "../update/helpers/agents.ts";

const nodes: TestServer[] = [];
const agents: Agent[] = [];
usePostgres({
  async setup(postgres) {
    const url = await postgres.createDatabase("runs");
    for (const name of ["node-1", "node-2"]) {
      const dataDir = tempDir();
      if (nodes[0]) cpSync(join(nodes[0].dataDir, KEYS_DIR), join(dataDir, KEYS_DIR), { recursive: true });
      const port = await freePort();
      nodes.push(
        await startTestServer(
          { ...FAST_SERVER, test_server: { device_wait: 5 }, listen: { host: "127.0.0.1", port }, database: { url }, cluster: { node_name: name, advertise_url: `http://127.0.0.1:${port}` } },
          dataDir,
        ),
      );
    }
  },
  async teardown() {
    for (const agent of agents) await agent.stop();
    for (const node of nodes) await node.close();
  },
});

test("a run started on node 2 runs on node 1's device (rows, end and artifact through node 1); node 1's run stream carries it; node 2 lists the device's actions", async () => {
  const [one, two] = nodes;
  const agent = startAgent(one, { name: "bench-1", tests: { enabled: true, max_duration: 60 } } as Record<string, unknown>);
  agents.push(agent);
  const id = await approveAgent(one, agent);
  assert.equal((await one.call("PATCH", `/api/v2/devices/${id}`, { name: "bench-1" })).status, 200);
  await waitFor(async () => (await device(two, id)).connected, 5000, "the device connected, seen from node 2");

  const actions = await two.call<Array<{ action_id: string }>>("GET", `/api/v2/devices/${agent.mac}/action/list`);
  assert.equal(actions.status, 200, JSON.stringify(actions.body));
  assert.deepEqual(actions.body.map((a) => a.action_id).sort(), ["echo", "ok", "svc.builtins.trigger_update_check"]);

  const reader = one.token(["tests_ro"], "watcher");
  const stream = await openStream(one, reader, "/api/v1/test-runs/stream");
  try {
    await uploadConfig(
      two,
      "bench.yml",
      ["tests:", "  board:", "    machines: [device:bench-1]", "    tests:", "    - exec:", "        name: note", "        command: [sh, -c, 'echo through > through.txt; echo written']", "        stdout_contains: written", ""].join("\n"),
    );
    const started = await two.call("POST", "/api/v1/test-runs", { config_name: "bench.yml" });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    const runId = started.body.id as string;
    const run = await waitRun(two, runId, undefined, 30_000);
    assert.equal(run.status, "finished", JSON.stringify(run));
    assert.deepEqual(
      (run.devices as Array<{ name: string; status: string; passed: number }>).map((d) => [d.name, d.status, d.passed]),
      [["bench-1", "finished", 2]],
    );
    const rows = await reportRows(two, runId);
    assert.deepEqual(rows.map((r) => [r["device name"], r["test name"], r.status]), [
      ["bench-1", "exit_code[test_config0]", "passed"],
      ["bench-1", "stdout[test_config0]", "passed"],
    ]);
    const artifact = await two.request(`/api/v1/test-runs/${runId}/artifacts/bench-1/through.txt`, { token: two.adminToken });
    assert.equal(await artifact.text(), "through\n");

    // Node 1's stream: every state node 2 wrote, as a read-only reader sees it.
    await stream.next((e) => e.event === "run" && e.data.id === runId && e.data.status === "finished", 10_000, "the finished event on node 1");
    const seen = stream.events.filter((e) => e.event === "run" && e.data.id === runId).map((e) => e.data.status);
    assert.deepEqual([...new Set(seen)], ["pending", "running", "finished"]);
    assert.ok(stream.events.some((e) => e.event === "trigger" && e.data.trigger_id === run.trigger_id), "the trigger's changes too");

    assert.equal((await two.request(`/api/v1/test-runs/${runId}/record`, { method: "DELETE", token: two.adminToken })).status, 200);
    await stream.next((e) => e.event === "run-deleted" && e.data.id === runId, 10_000, "the deletion on node 1");
  } finally {
    stream.close();
  }
});
