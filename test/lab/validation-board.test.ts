/*
 * A deployment's validation run holds its board like any test run on it (a real `labgate agent`):
 * triggered while another run has the board, it waits for it (test_server.board_wait); a run
 * started while the validation runs waits for the validation. The runs never overlap. One whose
 * board someone reserved after the install began neither runs on the held board nor fails: it
 * waits while the holder's own runs go, then takes the board once the reservation is released.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, connectedAgent, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { getRun, uploadConfig, waitRun, type RunObject } from "../testrun/run-helpers.ts";

const agents: Array<Agent & { dir: string }> = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer({ ...FAST_SERVER, test_server: { board_wait: 60 } });

const work = tempDir("labgate-validation-board-");
const stamps = join(work, "stamps");
const gate = (name: string) => join(work, `${name}.go`);
/** A case that writes when it begins, waits for its gate file, and writes when it ends. */
const mark = (name: string) => `[sh, -c, 'echo ${name} >> ${stamps}']`;
const stamped = (name: string) => `[sh, -c, 'echo ${name}-begin >> ${stamps}; while [ ! -e ${gate(name)} ]; do sleep 0.1; done; echo ${name}-end >> ${stamps}']`;
const lines = () => readFileSync(stamps, "utf8").split("\n").filter(Boolean);
const progress = async (id: string) => ((await getRun(server, id)).devices as Array<{ status: string }>)[0]!.status;
const member = async (deployment: number) => ((await server.call("GET", `/api/v2/deployments/${deployment}/devices`)).body as Array<{ state: string; output: string | null }>)[0]!;

test("a validation run waits for the run holding its board, and holds the board while it runs", async () => {
  writeFileSync(stamps, "");
  await uploadConfig(server, "user.yml", `tests:\n  g:\n    machines: ["device:val-board"]\n    tests:\n    - exec: {name: user, command: ${stamped("user")}}\n    - exec: {name: again, command: ${stamped("again")}}\n`);
  await uploadConfig(server, "again.yml", `tests:\n  g:\n    machines: ["device:val-board"]\n    tests:\n    - exec: {name: again, command: ${stamped("again")}}\n`);
  await uploadConfig(server, "validate.yml", `tests:\n  smoke:\n  - exec: {name: validate, command: ${stamped("validate")}}\n`);
  const image = join(tempDir("labgate-validation-agent-"), "image.bin");
  const agent = startAgent(server, {
    name: "val-board",
    device_type: "board",
    software_version: "v1",
    update_check_interval: 0.3,
    install_command: ["sh", "-c", 'cp "$1" "$2"', "install", "{file}", image],
    tests: { enabled: true },
  } as AgentOptions);
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "val-boards" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] })).status, 200);

  // A user's run has the board; the deployment installs meanwhile and its validation waits.
  const started = await server.call("POST", "/api/v1/test-runs", { config_name: "again.yml" });
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const user = started.body.id as string;
  await waitFor(async () => (await progress(user)) === "running" && lines().includes("again-begin"), 20_000, "the user's run on the board");
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", validation: { config: "validate.yml" } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deployment = created.body.id as number;
  await waitFor(() => existsSync(image), 20_000, "the agent installed v2");
  // Installed, its validation triggered: it waits for the board (the user's case is still running).
  const validation = await waitFor(async () => {
    const runs = (await server.call("GET", "/api/v1/test-runs?limit=20")).body as RunObject[];
    return runs.find((r) => r.id !== user && r.config_name === "validate.yml");
  }, 20_000, "the validation run");
  await waitFor(async () => (await progress(validation.id)) === "waiting", 10_000, "the validation run waiting for the board");
  assert.deepEqual(lines(), ["again-begin"], "nothing of the validation ran beside the user's run");
  writeFileSync(gate("again"), "");
  assert.equal((await waitRun(server, user, undefined, 20_000)).status, "finished");

  // The validation has the board now: the next user's run waits for it.
  await waitFor(() => lines().includes("validate-begin"), 20_000, "the validation on the board");
  const next = (await server.call("POST", "/api/v1/test-runs", { config_name: "user.yml" })).body.id as string;
  await waitFor(async () => (await progress(next)) === "waiting", 10_000, "the next run waiting for the validation");
  assert.deepEqual(lines(), ["again-begin", "again-end", "validate-begin"]);
  writeFileSync(gate("validate"), "");
  assert.equal((await waitRun(server, validation.id, undefined, 20_000)).status, "finished");
  assert.equal((await member(deployment)).state, "installed", "validated");
  writeFileSync(gate("user"), "");
  assert.equal((await waitRun(server, next, undefined, 20_000)).status, "finished");
  assert.deepEqual(lines(), ["again-begin", "again-end", "validate-begin", "validate-end", "user-begin", "user-end", "again-begin", "again-end"], "one after the other, never overlapped");
});

test("a validation run waits for a reservation made after the install, lets the holder's runs go, then holds the board", async () => {
  writeFileSync(stamps, "");
  await uploadConfig(server, "holder-res.yml", `tests:\n  g:\n    machines: ["device:res-board"]\n    tests:\n    - exec: {name: holder, command: ${mark("holder")}}\n`);
  await uploadConfig(server, "later-res.yml", `tests:\n  g:\n    machines: ["device:res-board"]\n    tests:\n    - exec: {name: later, command: ${mark("later")}}\n`);
  await uploadConfig(server, "validate-res.yml", `tests:\n  smoke:\n  - exec: {name: validate, command: ${stamped("checked")}}\n`);
  const image = join(work, "reserved-image.bin");
  // The install waits for its gate: the board is reserved while it installs, before its report.
  const install = ["sh", "-c", 'while [ ! -e "$3" ]; do sleep 0.1; done; cp "$1" "$2"', "install", "{file}", image, gate("install")];
  const { id } = await connectedAgent(server, agents, { name: "res-board", device_type: "board", software_version: "v1", update_check_interval: 0.3, install_command: install, tests: { enabled: true } } as AgentOptions);
  const holder = server.token(["tests_rw"], "holder-46v");
  for (const permission of ["read", "test"]) {
    assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "holder-46v", resource: "device", resource_id: id, permission })).status, 200);
  }
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v3", devtype: "board", file: Buffer.from("the v3 image") });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "reserved-boards" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] })).status, 200);
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v3", validation: { config: "validate-res.yml" } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deployment = created.body.id as number;
  await waitFor(async () => (await member(deployment)).state === "installing", 20_000, "the agent installing");

  assert.equal((await server.call("POST", `/api/v2/devices/${id}/reservation`, { minutes: 60, note: "looking at the new boot" }, holder)).status, 200);
  writeFileSync(gate("install"), "");
  await waitFor(() => existsSync(image), 20_000, "the agent installed v3");
  const validation = await waitFor(async () => {
    const runs = (await server.call("GET", "/api/v1/test-runs?limit=20")).body as RunObject[];
    return runs.find((r) => r.config_name === "validate-res.yml");
  }, 20_000, "the validation run");
  assert.equal(await progress(validation.id), "waiting");

  // The holder's own run takes the board past the waiting validation, and ends.
  const own = await server.call("POST", "/api/v1/test-runs", { config_name: "holder-res.yml" }, holder);
  assert.equal(own.status, 200, JSON.stringify(own.body));
  assert.equal((await waitRun(server, own.body.id as string, undefined, 20_000)).status, "finished");
  assert.deepEqual(lines(), ["holder"], "nothing of the validation ran on the held board");
  assert.equal(await progress(validation.id), "waiting");
  const waiting = await member(deployment);
  assert.equal(waiting.state, "installed", "held for its verdict, not failed");
  assert.equal((await server.call("GET", `/api/v2/deployments/${deployment}`)).body.status, "running", "the deployment waits for the verdict");

  // Released: the validation takes the board and holds it; a run started meanwhile waits for it.
  assert.equal((await server.call("DELETE", `/api/v2/devices/${id}/reservation`, undefined, holder)).status, 200);
  await waitFor(() => lines().includes("checked-begin"), 20_000, "the validation on the board");
  const later = (await server.call("POST", "/api/v1/test-runs", { config_name: "later-res.yml" }, holder)).body.id as string;
  await waitFor(async () => (await progress(later)) === "waiting", 10_000, "the next run waiting for the validation");
  writeFileSync(gate("checked"), "");
  assert.equal((await waitRun(server, validation.id, undefined, 20_000)).status, "finished");
  assert.equal((await waitRun(server, later, undefined, 20_000)).status, "finished");
  assert.deepEqual(lines(), ["holder", "checked-begin", "checked-end", "later"], "one after the other, never overlapped");
  assert.equal((await member(deployment)).state, "installed");
  // Its verdict was the last thing the deployment waited for.
  await waitFor(async () => (await server.call("GET", `/api/v2/deployments/${deployment}`)).body.status === "completed", 10_000, "the deployment completed");
});
