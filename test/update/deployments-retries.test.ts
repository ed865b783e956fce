/*
 * Issue 40's done-when run, with real agents (in-process) and the real server: a device whose
 * install always fails is tried exactly retries + 1 times and then never again (not by the
 * deployment, not by the group's policy after completion); the deployment ends
 * `completed_with_failures`; in a second deployment the device is `waiting` until its phase starts,
 * whatever it reports meanwhile; an agent that installs another version than offered fails with
 * the reason and its output.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { stableOrder } from "../../src/update/deployments/model.ts";
import { untilDeployment, untilDeploymentLooks } from "../helpers/events.ts";
import { startTestServer } from "../helpers/server.ts";
import { seedDevices } from "./helpers/devices.ts";
import { approveAgent, startAgent } from "./helpers/agents.ts";
import { uploadOk } from "./helpers/packages.ts";

interface Member {
  device: number;
  phase: number;
  state: string;
  reason: string | null;
  output: string | null;
  attempt: number;
  failures: number;
}
interface HistoryEntry {
  deployment: number | null;
  outcome: string;
  attempt: number | null;
  to_version: string;
  reason: string | null;
  output: string | null;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("retries: tried retries + 1 times, then held out; completed_with_failures; waiting until its phase; a version mismatch fails", async () => {
  const server = await startTestServer();
  const agents: Array<Agent & { dir: string }> = [];
  try {
    const v2 = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
    const v3 = await uploadOk(server, { token: server.adminToken, version: "v3", devtype: "board", file: Buffer.from("the v3 image") });
    const start = (name: string, script: string) => {
      const agent = startAgent(server, { device_type: "board", software_version: "v1", update_check_interval: 0.2, name, install_command: ["sh", "-c", script, "install", "{file}"] });
      agents.push(agent);
      return agent;
    };
    const failing = start("failing", 'echo "flashing $1"; echo "error: partition too small" >&2; exit 3');
    // Installs whatever it is offered, and says it installed v2.
    const stuck = start("stuck-at-v2", 'echo "writing $1"; echo "version=v2"');
    const good = [start("good-1", "echo ok"), start("good-2", "echo ok")];
    const ids = new Map<Agent, number>();
    for (const agent of agents) ids.set(agent, await approveAgent(server, agent));
    const id = (agent: Agent) => ids.get(agent)!;

    const group = (await server.call("POST", "/api/v2/groups", { metadata: { "svc.group.name": "boards" } })).body.id as number;
    assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [v2.id] })).status, 200);
    assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [...ids.values()], remove: [] })).status, 200);
    const members = async (deployment: number): Promise<Map<number, Member>> =>
      new Map(((await server.call("GET", `/api/v2/deployments/${deployment}/devices`)).body as Member[]).map((m) => [m.device, m]));
    const history = async (agent: Agent): Promise<HistoryEntry[]> => (await server.call("GET", `/api/v2/devices/${id(agent)}/update-history`)).body;
    const view = async (deployment: number) => (await server.call("GET", `/api/v2/deployments/${deployment}`)).body;

    // --- 1. bounded retries -----------------------------------------------------------------------
    const bad = await server.call("POST", "/api/v2/deployments", { group, version: "v2", retry_backoff_seconds: -1 });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /"retry_backoff_seconds"/);
    const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", retries: 2, retry_backoff_seconds: 0.1 });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const d1 = created.body.id as number;
    assert.deepEqual([created.body.retries, created.body.retry_backoff_seconds], [2, 0.1]);
    await untilDeployment(server, d1, (v) => v.status === "completed_with_failures", 20_000, "deployment 1 completed with failures");
    const done = await view(d1);
    assert.equal(done.counts.failed, 1, JSON.stringify(done.counts));
    assert.equal(done.counts.installed, 3, JSON.stringify(done.counts));
    assert.equal((await server.call("GET", `/api/v2/groups/${group}`)).body.policy, "exact_match,v2", "the steady state is the target");
    const failed = (await members(d1)).get(id(failing))!;
    assert.deepEqual([failed.state, failed.attempt, failed.failures, failed.reason], ["failed", 3, 3, "install command exited with 3"]);
    // Each attempt is one history row, with its reason and output.
    const tries = (await history(failing)).filter((h) => h.deployment === d1);
    assert.deepEqual(tries.map((h) => [h.outcome, h.attempt]), [["failed", 3], ["failed", 2], ["failed", 1]]);
    for (const h of tries) assert.match(h.output!, /flashing .*\nerror: partition too small\n$/);
    // Never again: the group's policy names v2, the device checks five times a second.
    await sleep(2000);
    assert.equal((await history(failing)).length, 3, "no further attempt under the group's policy");
    assert.equal(failing.softwareVersion, "v1");
    const progress = (await server.call("GET", "/api/v2/devices/progress")).body as Array<{ id: number }>;
    assert.ok(!progress.some((p) => p.id === id(failing)), "no stale progress record of a finished attempt");

    // --- 2. a second deployment: the failing device is `waiting` in its phase not yet started ----------
    // The failing device must come after the stuck one in deployment 2's recorded order (the first
    // phase ends just before it): deployments of a spare device move the next id on until it does.
    const spare = (await seedDevices(server, 1))[0].id;
    const spareGroup = (await server.call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
    await server.call("POST", `/api/v2/groups/${spareGroup}/package`, { packages: [v3.id] });
    await server.call("PATCH", `/api/v2/groups/${spareGroup}/devices`, { add: [spare], remove: [] });
    let next = d1 + 1;
    const positionIn = (deployment: number, agent: Agent) => stableOrder(deployment, [...ids.values()]).indexOf(id(agent));
    while (positionIn(next, failing) === 0 || positionIn(next, stuck) > positionIn(next, failing)) {
      const dummy = await server.call("POST", "/api/v2/deployments", { group: spareGroup, version: "v3", start_at: "2099-01-01T00:00:00Z" });
      assert.equal(dummy.status, 201, JSON.stringify(dummy.body));
      await server.call("POST", `/api/v2/deployments/${dummy.body.id}/abort`);
      next = dummy.body.id + 1;
    }
    const second = await server.call("POST", "/api/v2/deployments", {
      group,
      version: "v3",
      packages: [v3.id],
      phases: [{ devices: positionIn(next, failing) }, 100],
      success_percent: null,
      retries: 0,
    });
    assert.equal(second.status, 201, JSON.stringify(second.body));
    const d2 = second.body.id as number;
    assert.equal(d2, next);
    // What the device says meanwhile (an outcome of no offer of this deployment) is not its state here.
    (failing as unknown as { outcomes: { report(o: object): void } }).outcomes.report({ state: "failed", version: "v2", from_version: "v1", reason: "a leftover" });
    // --- 3. the version mismatch, in the first phase ------------------------------------------------
    await untilDeploymentLooks(server, d2, () => members(d2), (m) => m.get(id(stuck))!.state === "failed", 20_000, "the stuck device failed");
    const mismatch = (await members(d2)).get(id(stuck))!;
    assert.equal(mismatch.reason, "reported v2, offered v3");
    assert.match(mismatch.output!, /writing .*\nversion=v2\n/);
    assert.equal(stuck.softwareVersion, "v2");
    const stuckRows = (await history(stuck)).filter((h) => h.deployment === d2);
    assert.deepEqual(stuckRows.map((h) => [h.outcome, h.to_version, h.reason]), [["failed", "v3", "reported v2, offered v3"]]);
    await untilDeployment(server, d2, (v) => v.gate === "stuck", 20_000, "the first phase finished");
    const waiting = (await members(d2)).get(id(failing))!;
    assert.deepEqual([waiting.phase, waiting.state, waiting.reason, waiting.output, waiting.attempt], [1, "waiting", null, null, 0]);
    assert.equal((await view(d2)).counts.failed, 1, "only the mismatch counts toward the threshold");
    assert.ok(!(await history(failing)).some((h) => h.reason === "a leftover"), "an outcome of no offer is dropped");

    // Its phase starts: now it is tried (once: retries 0), and fails there.
    assert.equal((await server.call("POST", `/api/v2/deployments/${d2}/advance`)).status, 200);
    await untilDeployment(server, d2, (v) => v.status === "completed_with_failures", 20_000, "deployment 2 completed with failures");
    const last = (await members(d2)).get(id(failing))!;
    assert.deepEqual([last.state, last.attempt, last.reason], ["failed", 1, "install command exited with 3"]);
    const ended = JSON.stringify([...(await members(d2)).values()]);
    for (const agent of good) assert.equal(agent.softwareVersion, "v3", `device ${id(agent)}: ${ended}; its history: ${JSON.stringify(await history(agent))}`);
    // Neither failed device is offered v3 again by the group's policy.
    await sleep(1000);
    assert.equal((await history(stuck)).filter((h) => h.deployment === d2).length, 1, JSON.stringify(await history(stuck)));
    assert.equal((await history(failing)).filter((h) => h.deployment === d2).length, 1, JSON.stringify(await history(failing)));
  } finally {
    await Promise.all(agents.map((a) => a.stop()));
    await server.close();
    for (const agent of agents) await rm(agent.dir, { recursive: true, force: true });
    await rm(join(server.dataDir), { recursive: true, force: true });
  }
});
