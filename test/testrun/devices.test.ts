// Test runs on managed devices (docs/device-tests.md) with in-process agents: targets, the `test`
// permission, rows and artifacts per device, refusals, offline devices, abort, the history.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { tempDir, useTestServer, type TestServer } from "../helpers/server.ts";
import { NOT_CONNECTED, TESTS_DISABLED } from "../../src/testrun/devices/runs.ts";
import { approveAgent, disconnecting, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
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

    const summary = (await server.call("GET", `/api/v1/test-runs/${run.id}/report/summary`)).body;
    assert.deepEqual(summary.devices, [
      { device: "bench-a", total: 7, passed: 6, failed: 1, skipped: 0 },
      { device: "bench-b", total: 7, passed: 6, failed: 1, skipped: 0 },
    ]);
    const grouped = (await server.call("GET", `/api/v1/test-runs/${run.id}/report?format=json&group_by=device`)).body as Array<{ device: string; failed: number; rows: Array<Record<string, string>> }>;
    assert.deepEqual(grouped.map((g) => [g.device, g.failed, g.rows.length, g.rows.every((r) => r["device name"] === g.device)]), [["bench-a", 1, 7, true], ["bench-b", 1, 7, true]]);
    assert.equal((await server.call("GET", `/api/v1/test-runs/${run.id}/report?group_by=device`)).status, 400);

    // The history: each test per device over the runs; a second run where exec fails marks it newly failing.
    await uploadConfig(server, "lab.yml", CONFIG.replace("echo ok", "exit 1"));
    const again = await waitRun(server, (await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml" })).body.id);
    const history = await server.call("GET", "/api/v1/configs/lab.yml/history?runs=5&limit=4");
    assert.equal(history.status, 200, JSON.stringify(history.body));
    assert.equal(history.headers.get("x-total-count"), "14");
    assert.deepEqual(history.body.runs.map((r: { id: string }) => r.id), [again.id, run.id]);
    assert.deepEqual(history.body.rows[0], { device: "bench-a", mac_address: a.agent.mac, test_name: "conditional_skip[test_config0]", name: "", results: ["passed", "passed"], flaky: false, newly_failing: false });
    const exit = history.body.rows.find((r: { test_name: string }) => r.test_name === "exit_code[test_config0]");
    assert.deepEqual([exit.results, exit.flaky, exit.newly_failing], [["failed", "passed"], true, true]);
    const next = await server.call("GET", "/api/v1/configs/lab.yml/history?runs=1&limit=100&offset=12");
    assert.deepEqual([next.body.rows.length, next.body.runs.length, next.body.rows[0].device], [2, 1, "bench-b"]);
  });

  test("targets are resolved at trigger: unknown devices, groups and tags are 4xx naming them, an empty group too; nothing is created", async () => {
    await uploadConfig(server, "target.yml", "tests:\n  g:\n  - simple: {}\n");
    const before = (await server.call("GET", "/api/v1/test-runs")).body.length;
    const refused = async (target: string, status: number, text: string) => {
      const res = await server.call("POST", "/api/v1/test-runs", { config_name: "target.yml", machine_target: target });
      assert.equal(res.status, status, `${target}: ${JSON.stringify(res.body)}`);
      assert.match(res.body.error, new RegExp(text), target);
    };
    await refused("device:nosuch", 404, "unknown device 'nosuch'");
    await refused("device:00:11:22:33:44:55", 404, "unknown device '00:11:22:33:44:55'");
    await refused("group:nosuch", 404, "unknown group 'nosuch'");
    await refused("tag:nosuch", 404, "no device is tagged 'nosuch'");
    await group(server, "empty", []);
    await refused("group:empty", 422, "group 'empty' has no devices");
    // The name as the console and the reference's tools store it, <prefix>.group.name, before a plain `name`.
    assert.equal((await server.call("POST", "/api/v2/groups", { metadata: { "svc.group.name": "console-made", name: "plain" } })).status, 200);
    await refused("group:console-made", 422, "group 'console-made' has no devices");
    await refused("group:plain", 404, "unknown group 'plain'");
    assert.equal((await server.call("GET", "/api/v1/test-runs")).body.length, before);
  });

  test("the `test` permission: svc_tests_rw alone gets 403 naming the devices; per device `test` lets it run; admin_rw always", async () => {
    const c = await device("bench-c");
    const d = await device("bench-d");
    await server.call("POST", `/api/v2/devices/${c.id}/tag/perm`);
    await server.call("POST", `/api/v2/devices/${d.id}/tag/perm`);
    await uploadConfig(server, "perm.yml", "tests:\n  g:\n  - simple: {}\n");
    const alice = server.token(["tests_rw", "tests_ro"], "alice");
    const body = { config_name: "perm.yml", machine_target: "tag:perm" };
    // Devices alice may not even read are not hers to target.
    const hidden = await server.call("POST", "/api/v1/test-runs", body, alice);
    assert.equal(hidden.status, 404, JSON.stringify(hidden.body));
    for (const id of [c.id, d.id]) assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "alice", resource: "device", resource_id: id, permission: "read" })).status, 200);
    const forbidden = await server.call("POST", "/api/v1/test-runs", body, alice);
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.body.error, "no test permission on devices 'bench-c', 'bench-d'");
    await server.call("POST", "/api/v1/permissions", { user_id: "alice", resource: "device_by_tag", resource_name: "perm", permission: "test" });
    const allowed = await server.call("POST", "/api/v1/test-runs", body, alice);
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
    const run = await waitRun(server, allowed.body.id);
    assert.deepEqual((run.devices as Array<{ name: string }>).map((x) => x.name).sort(), ["bench-c", "bench-d"]);
  });

  test("a device whose agent has tests disabled, and one that stays offline, get their cases failed with the reason", async () => {
    const off = await device("bench-off", { tests: { enabled: false } } as AgentOptions);
    const gone = await device("bench-gone");
    await disconnecting(server, gone.agent.mac, () => gone.agent.stop());
    await uploadConfig(server, "off.yml", "tests:\n  g:\n  - simple: {}\n");
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "off.yml", machine_target: "device:bench-off" });
    const run = await waitRun(server, started.body.id);
    assert.equal(run.status, "failed");
    assert.equal(run.error, `device 'bench-off': ${TESTS_DISABLED}`);
    const rows = await report(run.id);
    assert.equal(rows.length, 5);
    assert.ok(rows.every((r) => r.status === "failed" && r.message === TESTS_DISABLED && r["device name"] === "bench-off"), JSON.stringify(rows));

    const offline = await server.call("POST", "/api/v1/test-runs", { config_name: "off.yml", machine_target: `device:${gone.agent.mac}` });
    assert.equal(offline.status, 200);
    const ended = await waitRun(server, offline.body.id);
    assert.equal(ended.error, `device 'bench-gone': ${NOT_CONNECTED}`);
    assert.ok((await report(ended.id)).every((r) => r.status === "failed" && r.message === NOT_CONNECTED));
    void off;
  });

  test("an agent that stops mid-run ends its share aborted; abort stops the other devices' runs", async () => {
    const e = await device("bench-e");
    const f = await device("bench-f");
    await group(server, "slow", [e.id, f.id]);
    await uploadConfig(server, "slow.yml", ["tests:", "  g:", "    machines: [group:slow]", "    tests:", "    - exec:", "        command: [sleep, '30']", "    - simple: {}", ""].join("\n"));
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "slow.yml" });
    await waitRun(server, started.body.id, (r) => (r.devices as Array<{ status: string }>).every((x) => x.status === "running"));
    await f.agent.stop();
    const half = await waitRun(server, started.body.id, (r) => (r.devices as Array<{ name: string; status: string }>).some((x) => x.name === "bench-f" && x.status !== "running"));
    const fProgress = (half.devices as Array<{ name: string; status: string; error: string }>).find((x) => x.name === "bench-f")!;
    assert.deepEqual([fProgress.status, fProgress.error], ["aborted", "agent stopping"]);
    assert.equal((await server.call("DELETE", `/api/v1/test-runs/${started.body.id}`)).status, 200);
    const run = await waitRun(server, started.body.id);
    assert.equal(run.status, "aborted");
    const eProgress = (run.devices as Array<{ name: string; status: string }>).find((x) => x.name === "bench-e")!;
    assert.equal(eProgress.status, "aborted");
    const rows = await report(run.id);
    assert.ok(rows.some((r) => r["device name"] === "bench-e" && r.message === "Aborted by user"), JSON.stringify(rows));
  });

  test("hardware modules on the device read its own sys_root: each board's thermal zone decides its row", async () => {
    const board = (celsius: number) => {
      const root = tempDir("labgate-fake-sys-");
      mkdirSync(join(root, "class/thermal/thermal_zone0"), { recursive: true });
      writeFileSync(join(root, "class/thermal/thermal_zone0/type"), "cpu-thermal\n");
      writeFileSync(join(root, "class/thermal/thermal_zone0/temp"), `${celsius * 1000}\n`);
      return root;
    };
    const cool = await device("board-cool", { tests: { enabled: true, sys_root: board(45) } } as AgentOptions);
    const hot = await device("board-hot", { tests: { enabled: true, sys_root: board(95) } } as AgentOptions);
    await server.call("POST", `/api/v2/devices/${cool.id}/tag/boards`);
    await server.call("POST", `/api/v2/devices/${hot.id}/tag/boards`);
    await uploadConfig(server, "thermal.yml", "tests:\n  temps:\n  - thermal:\n      zone: cpu-thermal\n      max: 85\n");
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "thermal.yml", machine_target: "tag:boards" });
    const run = await waitRun(server, started.body.id);
    const rows = (await report(run.id)).map((r) => [r["device name"], r.status]).sort();
    assert.deepEqual(rows, [["board-cool", "passed"], ["board-hot", "failed"]]);
    assert.deepEqual(run.counts, { passed: 1, failed: 1, skipped: 0 }, "the run's cases summed over its devices");
  });

  test("runOnDevice (an update's validation): the gateway runs a pinned config on one device and awaits its end", async () => {
    const v = await device("validate-me");
    await uploadConfig(server, "validate.yml", "tests:\n  smoke:\n  - exec:\n      command: [sh, -c, 'exit 4']\n");
    const runs = server.server.domains.testRun.runs;
    const pinned = runs.pinOnDevice("validate.yml", "");
    // What runs is the copy: the config uploaded since is not read.
    await uploadConfig(server, "validate.yml", "tests:\n  smoke:\n  - exec:\n      command: [sh, -c, 'exit 0']\n");
    const run = await runs.runOnDevice(pinned, { id: v.id, mac: v.agent.mac, name: "validate-me" }, 1);
    assert.equal(run.machineTarget, `device:${v.agent.mac}`);
    const ended = await runs.finalRun(run.id);
    assert.equal(ended?.status, "failed");
    assert.deepEqual((await report(run.id)).map((r) => [r["device name"], r.status]), [["validate-me", "failed"]]);
  });
});
