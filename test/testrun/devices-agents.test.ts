// A run on managed devices end to end with real agents (`labgate agent` child processes):
// machines: [group:lab] on three devices, one with tests disabled, one killed mid-run, an abort
// for the rest; one report and the artifacts per device.
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { after, test } from "node:test";
import { DISCONNECTED, TESTS_DISABLED } from "../../src/testrun/devices/runs.ts";
import { useTestServer, type TestServer } from "../helpers/server.ts";
import { FAST_SERVER, spawnConnectedAgent } from "../update/helpers/agents.ts";
import { uploadConfig, waitRun, type RunObject } from "./run-helpers.ts";

const children: ChildProcess[] = [];
after(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});
const server = useTestServer({ ...FAST_SERVER, test_server: { device_wait: 5 } });

/** `labgate agent` as a child process, named `name`, approved and connected; its device id. */
async function agentProcess(server: TestServer, name: string, tests: boolean): Promise<{ child: ChildProcess; id: number }> {
  const agent = await spawnConnectedAgent(server, [`name: ${name}`, `tests: {enabled: ${tests}, max_duration: 120}`]);
  children.push(agent.child);
  return agent;
}

type Progress = { name: string; status: string; passed: number; failed: number; skipped: number; error: string | null };
const progressOf = (run: RunObject, name: string): Progress => (run.devices as Progress[]).find((d) => d.name === name)!;

test("machines: [group:lab] on three agents: one with tests disabled fails clearly, one killed mid-run is 'device disconnected', abort stops the third; one report, artifacts per device", async () => {
  const [one, killed, disabled] = await Promise.all([agentProcess(server, "lab-1", true), agentProcess(server, "lab-2", true), agentProcess(server, "lab-3", false)]);
  const group = await server.call("POST", "/api/v2/groups", { metadata: { name: "lab" } });
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group.body.id}/devices`, { add: [one.id, killed.id, disabled.id], remove: [] })).status, 200);
  await uploadConfig(
    server,
    "lab.yml",
    [
      "tests:",
      "  board:",
      "    machines: [group:lab]",
      "    tests:",
      "    - exec:",
      "        name: note",
      "        command: [sh, -c, 'uname > uname.txt; echo written']",
      "        stdout_contains: written",
      "    - exec:",
      "        name: long",
      "        command: [sleep, '60']",
      "",
    ].join("\n"),
  );
  const started = await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml" });
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const id = started.body.id as string;

  // lab-1 and lab-2 passed the first entry and sleep in the second; lab-3 refused at once.
  await waitRun(server, id, (r) => progressOf(r, "lab-1").passed === 2 && progressOf(r, "lab-2").passed === 2 && progressOf(r, "lab-3").status === "failed", 30_000);
  killed.child.kill("SIGKILL");
  await waitRun(server, id, (r) => progressOf(r, "lab-2").status === "failed", 15_000);
  assert.equal((await server.call("DELETE", `/api/v1/test-runs/${id}`)).status, 200);
  const run = await waitRun(server, id, undefined, 20_000);

  assert.equal(run.status, "aborted");
  assert.deepEqual(
    (run.devices as Progress[]).map((d) => [d.name, d.status, d.error]),
    [
      ["lab-2", "failed", DISCONNECTED],
      ["lab-3", "failed", TESTS_DISABLED],
      ["lab-1", "aborted", "Aborted by user"],
    ],
  );
  const rows = (await server.call("GET", `/api/v1/test-runs/${id}/report?format=json`)).body as Array<Record<string, string>>;
  const of = (device: string) => rows.filter((r) => r["device name"] === device).map((r) => [r["test name"], r.status, r.message]);
  assert.deepEqual(of("lab-1"), [
    ["exit_code[test_config0]", "passed", ""],
    ["stdout[test_config0]", "passed", ""],
    ["exit_code[test_config1]", "skipped", "Aborted by user"],
  ]);
  assert.deepEqual(of("lab-2"), [
    ["exit_code[test_config0]", "passed", ""],
    ["stdout[test_config0]", "passed", ""],
    ["exit_code[test_config1]", "failed", DISCONNECTED],
  ]);
  assert.deepEqual(of("lab-3").map((r) => r[1] + " " + r[2]), [`failed ${TESTS_DISABLED}`, `failed ${TESTS_DISABLED}`, `failed ${TESTS_DISABLED}`]);
  const grouped = (await server.call("GET", `/api/v1/test-runs/${id}/report?format=json&group_by=device`)).body as Array<{ device: string; failed: number }>;
  assert.deepEqual(grouped.map((g) => [g.device, g.failed]), [["lab-2", 1], ["lab-3", 3], ["lab-1", 0]]);

  // lab-1 uploaded what its cases wrote after the abort; lab-2 died before it could.
  const artifacts = ((await server.call("GET", `/api/v1/test-runs/${id}/artifacts`)).body as Array<{ name: string }>).map((a) => a.name);
  assert.deepEqual(artifacts, ["lab-1/uname.txt"]);
  const uname = await server.request(`/api/v1/test-runs/${id}/artifacts/lab-1/uname.txt`, { token: server.adminToken });
  assert.equal(await uname.text(), "Linux\n");
});
