// Test runs on managed devices (docs/device-tests.md) with in-process agents: targets, the `test`
// permission, rows and artifacts per device, refusals, offline devices, abort, the history.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { useTestServer, type TestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { uploadConfig, waitRun, type RunObject } from "./run-helpers.ts";

const agents: Array<Agent & { dir: string }> = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer({ ...FAST_SERVER, test_server: { device_wait: 1, compat_modules: true } });

/** An approved, connected agent named `name`; returns its device id. */
async function device(name: string, options: AgentOptions = {}): Promise<{ agent: Agent & { dir: string }; id: number }> {
  const agent = startAgent(server, { name, tests: { enabled: true }, ...options } as AgentOptions);
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  return { agent, id };
}

async function group(server: TestServer, name: string, devices: number[]): Promise<number> {
  const created = await server.call("POST", "/api/v2/groups", { metadata: { name } });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const id = (created.body as { id: number }).id;
  const added = await server.call("PATCH", `/api/v2/groups/${id}/devices`, { add: devices, remove: [] });
  assert.equal(added.status, 200, JSON.stringify(added.body));
  return id;
}

const report = async (id: string): Promise<Array<Record<string, string>>> => (await server.call("GET", `/api/v1/test-runs/${id}/report?format=json`)).body;

const CONFIG = [
  "tests:",
  "  checks:",
  "    machines: [group:lab]",
  "    tests:",
  "    - exec:",
  "        command: [sh, -c, 'echo hello > out.txt; echo ok']",
  "        stdout_contains: ok",
  "    - simple: {}",
  "",
].join("\n");

describe("runs on devices", () => {
  test("a group's devices each run their share: one report with the devices' names, artifacts under <device>/, counts per device", async () => {
    const a = await device("bench-a");
    const b = await device("bench-b");
    await group(server, "lab", [a.id, b.id]);
    await uploadConfig(server, "lab.yml", CONFIG);
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml" });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    const run = await waitRun(server, (started.body as RunObject).id);
    assert.equal(run.status, "failed", JSON.stringify(run)); // simple's `failure` case fails on purpose
    const devices = run.devices as Array<{ name: string; status: string; passed: number; failed: number; skipped: number }>;
    assert.deepEqual(devices.map((d) => [d.name, d.status, d.passed, d.failed]).sort(), [["bench-a", "failed", 6, 1], ["bench-b", "failed", 6, 1]]);
    const rows = await report(run.id);
    assert.equal(rows.length, 14);
    assert.deepEqual([...new Set(rows.map((r) => r["device name"]))].sort(), ["bench-a", "bench-b"]);
    assert.ok(rows.some((r) => r["device name"] === "bench-a" && r["test name"] === "exit_code[test_config0]" && r.status === "passed"));
    const artifacts = (await server.call("GET", `/api/v1/test-runs/${run.id}/artifacts`)).body as Array<{ name: string }>;
    const names = artifacts.map((x) => x.name).sort();
    assert.deepEqual(names, ["bench-a/file.txt", "bench-a/out.txt", "bench-b/file.txt", "bench-b/out.txt"]);
    const file = await server.request(`/api/v1/test-runs/${run.id}/artifacts/bench-b/out.txt`, { token: server.adminToken });
    assert.equal(await file.text(), "hello\n");
  });
});
