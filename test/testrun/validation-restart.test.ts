// A deployment's validation that is running when the gateway stops (docs/device-tests.md) runs
// again once it starts, and the deployment waits for that verdict; a validation that passed is
// not run again by a later restart. The agent (in-process) stops its share when the gateway goes.
import assert from "node:assert/strict";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { openStream, untilEvent } from "../helpers/events.ts";
import { removeDir, startTestServer, tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { uploadConfig, waitRun, type RunObject } from "./run-helpers.ts";

interface Member {
  device: number;
  state: string;
  reason: string | null;
}

test("a validation interrupted by a gateway stop runs again after the start; one that passed does not", async () => {
  const dataDir = tempDir();
  const patch = { ...FAST_SERVER, test_server: { device_wait: 20 } };
  let server: TestServer = await startTestServer(patch, dataDir);
  const restart = async () => {
    await server.close();
    server = await startTestServer({ ...patch, listen: { host: "127.0.0.1", port: server.server.port } }, dataDir);
  };
  const dir = tempDir("labgate-validate-restart-");
  const agent = startAgent(server, {
    name: "board-1",
    device_type: "board",
    software_version: "v1",
    update_check_interval: 0.3,
    install_command: ["sh", "-c", 'cp "$1" "$2"', "install", "{file}", join(dir, "image.bin")],
    tests: { enabled: true },
  } as AgentOptions);
  try {
    const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
    // Cases run in <data_dir>/tests/<run>/artifacts/<run>: the validation waits until the data dir holds `go`, and says where it ran.
    await uploadConfig(server, "validate.yml", "tests:\n  smoke:\n  - exec:\n      name: smoke\n      command: [sh, -c, 'touch ../../../../started; while [ ! -e ../../../../go ]; do sleep 0.05; done']\n");
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    // A second device that never comes back keeps the deployment active across the restarts.
    const away = startAgent(server, { name: "board-2", device_type: "board", software_version: "v1" } as AgentOptions);
    const awayId = await approveAgent(server, away);
    await untilConnected(server, awayId);
    await away.stop();
    removeDir(away.dir);
    const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "boards" } })).body.id as number;
    assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
    assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id, awayId], remove: [] })).status, 200);
    const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", phases: [100], validation: { config: "validate.yml" } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const deployment = created.body.id as number;
    const runs = async () => (await server.call("GET", "/api/v1/test-runs")).body as RunObject[];
    const member = async () => ((await server.call("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body as Member[]).find((m) => m.device === id)!;
    const status = async () => (await server.call("GET", `/api/v2/deployments/${deployment}`)).body.status as string;

    // Installed, its validation running on the device: the gateway stops.
    const started = join(agent.config.data_dir, "started");
    await waitFor(() => existsSync(started), 30_000, "the validation running on the device");
    assert.equal((await member()).state, "installed");
    assert.equal(await status(), "running");
    const [first] = await runs();
    rmSync(started);
    await restart();

    // The interrupted run ended with the restart; a new one runs, and the deployment waits for it.
    assert.equal((await server.call("GET", `/api/v1/test-runs/${first!.id}`)).body.status, "aborted");
    const stream = await openStream(server, server.adminToken, "/api/v1/test-runs/stream");
    const rerun = (list: RunObject[]) => list.find((r) => r.id !== first!.id && r.status === "running");
    const again = rerun(await untilEvent(stream, runs, (list) => rerun(list) !== undefined, (e) => e.event === "run", 30_000, "the validation running again").finally(() => stream.close()))!;
    await waitFor(() => existsSync(started), 10_000, "the new share started on the device");
    writeFileSync(join(agent.config.data_dir, "go"), "");
    assert.equal((await waitRun(server, again.id, undefined, 30_000)).status, "finished", "the validation passed");
    assert.equal((await member()).state, "installed");
    assert.equal(await status(), "running");

    // Passed: a later restart does not validate it again.
    await restart();
    await untilConnected(server, id);
    assert.deepEqual((await runs()).map((r) => r.id).sort(), [first!.id, again.id].sort());
  } finally {
    await agent.stop();
    await server.close();
    removeDir(dataDir);
    removeDir(dir);
  }
});
