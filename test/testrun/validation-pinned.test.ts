// Issue 39, item 2: a deployment runs its validation config as it was when the deployment was made
// (its pinned copy, docs/device-tests.md): an svc_tests_rw account that uploads another config under
// that name changes nothing its devices run. Its validation run is audited (testrun.trigger, naming
// the deployment), and reading or stopping it needs what the device requires: read to see it,
// update to stop it (its end decides the device's update), not svc_tests_rw alone.
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { entries } from "../audit/helpers.ts";
import { untilDeployment } from "../helpers/events.ts";
import { removeDir, startTestServer, tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { uploadConfig, type RunObject } from "./run-helpers.ts";

const agents: Agent[] = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);

async function grant(user_id: string, resource_id: number, ...permissions: string[]): Promise<void> {
  for (const permission of permissions) {
    const res = await server.call("POST", "/api/v1/permissions", { user_id, resource: "device", resource_id, permission });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
}

test("a validation runs the config pinned at the deployment's creation; its run is audited and hidden from, and unstoppable by, accounts without the device's permissions", async () => {
  const dir = tempDir("labgate-validate-pinned-");
  const gate = join(dir, "install-now");
  // The install waits for the test's word: the config is replaced after the deployment was made, before its run.
  const agent = startAgent(server, {
    name: "pinned-1",
    device_type: "board",
    software_version: "v1",
    update_check_interval: 0.3,
    install_command: ["sh", "-c", 'while [ ! -e "$3" ]; do sleep 0.05; done; cp "$1" "$2"', "install", "{file}", join(dir, "image.bin"), gate],
    tests: { enabled: true },
  } as AgentOptions);
  agents.push(agent);
  const device = await approveAgent(server, agent);
  await untilConnected(server, device);
  const data = agent.config.data_dir;

  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "pinned" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [device], remove: [] })).status, 200);
  // Cases run in <data_dir>/tests/<run>/artifacts/<run>: each run says what it was, then waits for `go`.
  const config = (word: string) => `tests:\n  smoke:\n  - exec:\n      name: smoke\n      command: [sh, -c, 'echo ${word} >> ../../../../ran; while [ ! -e ../../../../go ]; do sleep 0.05; done']\n`;
  await uploadConfig(server, "validate.yml", config("original"));
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", phases: [100], validation: { config: "validate.yml" } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deployment = created.body.id as number;

  // mallory: svc_tests_rw, no permission on the device. Her upload under that name changes nothing the deployment runs.
  const mallory = server.token(["tests_rw"], "mallory");
  await uploadConfig(server, "validate.yml", config("replaced"), mallory);
  assert.deepEqual((await server.call("GET", `/api/v2/deployments/${deployment}`)).body.validation, { config: "validate.yml", suite: "" });
  writeFileSync(gate, "");
  await waitFor(() => existsSync(join(data, "ran")), 30_000, "the validation started on the device");
  assert.equal(readFileSync(join(data, "ran"), "utf8"), "original\n");
  const run = ((await server.call<RunObject[]>("GET", "/api/v1/test-runs")).body).find((r) => r.machine_target === `device:${agent.mac}`)!;
  assert.equal(run.status, "running");

  // On record: who ran what, for which deployment.
  const [audit] = await entries(server, `action=testrun.trigger&target=run:${run.id}`);
  assert.deepEqual([audit?.actor_kind, audit?.actor, audit?.detail], ["system", "server", { config: "validate.yml", suite: "", deployment, device: agent.mac }]);

  // mallory sees the run but nothing of its device (docs/device-tests.md, "Who sees a device's results"), and cannot stop it; nor through its trigger.
  const seen = await server.call<RunObject>("GET", `/api/v1/test-runs/${run.id}`, undefined, mallory);
  assert.deepEqual([seen.status, seen.body.devices, seen.body.machine_target], [200, [], null]);
  const abort = await server.call("DELETE", `/api/v1/test-runs/${run.id}`, undefined, mallory);
  assert.deepEqual([abort.status, abort.body.error], [403, "insufficient permission to a resource: a deployment's validation run needs update on each of its devices"]);
  assert.equal((await server.call("DELETE", `/api/v1/test-runs/trigger/${run.trigger_id}`, undefined, mallory)).status, 403);
  // tess may read the device and run tests on it: she sees the run, but stopping it (which would roll the device back) needs update.
  await grant("tess", device, "read", "test");
  const tess = server.token(["tests_rw"], "tess");
  assert.equal((await server.call("GET", `/api/v1/test-runs/${run.id}`, undefined, tess)).status, 200);
  const refused = await server.call("DELETE", `/api/v1/test-runs/${run.id}`, undefined, tess);
  assert.deepEqual([refused.status, refused.body.error], [403, "insufficient permission to a resource: a deployment's validation run needs update on each of its devices"]);
  assert.equal((await server.call("DELETE", `/api/v1/test-runs/trigger/${run.trigger_id}`, undefined, tess)).status, 403);
  assert.equal((await server.call("GET", `/api/v1/test-runs/${run.id}`)).body.status, "running", "nobody stopped it");

  // It passes: the device is validated, the deployment completes; mallory still sees nothing of the device.
  writeFileSync(join(data, "go"), "");
  await untilDeployment(server, deployment, (v) => v.status === "completed", 30_000, "the deployment completed");
  assert.equal(readFileSync(join(data, "ran"), "utf8"), "original\n", "the replaced config never ran");
  assert.deepEqual((await server.call<RunObject>("GET", `/api/v1/test-runs/${run.id}`, undefined, mallory)).body.devices, []);
  assert.deepEqual((await server.call("GET", `/api/v1/test-runs/${run.id}/report?format=json`, undefined, mallory)).body, []);
  assert.equal((await server.call("GET", `/api/v1/test-runs/${run.id}/report/summary`, undefined, mallory)).body.total, 0);
  assert.deepEqual((await server.call("GET", `/api/v1/test-runs/${run.id}/artifacts`, undefined, mallory)).body, []);
  for (const path of [`/api/v1/test-runs/${run.id}/report?format=json`, `/api/v1/test-runs/${run.id}/report/summary`]) {
    assert.equal((await server.call("GET", path, undefined, tess)).status, 200, path);
  }
  assert.notDeepEqual((await server.call("GET", `/api/v1/test-runs/${run.id}/report?format=json`, undefined, tess)).body, [], "tess reads the device's rows");
  assert.equal((await server.call("DELETE", `/api/v1/test-runs/${run.id}/record`, undefined, mallory)).status, 403);
  assert.equal((await server.call("DELETE", `/api/v1/test-runs/${run.id}/record`, undefined, tess)).status, 403);
});

test("a deployment made before configs were pinned (no copy) gets its copy at the next start: uploads from then on change nothing it runs", async () => {
  const dataDir = tempDir();
  let gateway = await startTestServer({}, dataDir);
  try {
    const [device] = await seedDevices(gateway, 1);
    const pkg = await uploadOk(gateway, { token: gateway.adminToken, version: "v2", devtype: "board" });
    const group = (await gateway.call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
    assert.equal((await gateway.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
    assert.equal((await gateway.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [device!.id], remove: [] })).status, 200);
    await uploadConfig(gateway, "legacy.yml", "tests:\n  smoke:\n  - exec:\n      command: [echo, before]\n");
    const created = await gateway.call("POST", "/api/v2/deployments", { group, version: "v2", start_at: "2999-01-01T00:00:00Z", validation: { config: "legacy.yml" } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as number;
    const copy = async () => (await gateway.db.get<{ c: string | null }>("SELECT validation_copy AS c FROM deployments WHERE id = ?", [id]))?.c ?? null;
    assert.match((await copy()) ?? "", /echo, before/);
    // As a data dir from before the copy was kept: none.
    await gateway.db.run("UPDATE deployments SET validation_copy = NULL WHERE id = ?", [id]);
    await uploadConfig(gateway, "legacy.yml", "tests:\n  smoke:\n  - exec:\n      command: [echo, at-restart]\n");
    await gateway.close();
    gateway = await startTestServer({}, dataDir);
    assert.match((await copy()) ?? "", /echo, at-restart/);
    await uploadConfig(gateway, "legacy.yml", "tests:\n  smoke:\n  - exec:\n      command: [echo, later]\n");
    await gateway.close();
    gateway = await startTestServer({}, dataDir);
    assert.match((await copy()) ?? "", /echo, at-restart/, "pinned once");
  } finally {
    await gateway.close();
    removeDir(dataDir);
  }
});
