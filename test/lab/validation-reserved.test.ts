/*
 * A deployment's validation run on a board someone reserved after the install began (a real
 * `labgate agent`): it neither runs on the held board nor fails, but waits while the holder's own
 * runs go; once the reservation is released it takes the board, holds it (a run started meanwhile
 * waits for it) and its verdict decides the update.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { connectedAgent, FAST_SERVER, type AgentOptions } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { getRun, uploadConfig, waitRun, type RunObject } from "../testrun/run-helpers.ts";

const agents: Agent[] = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer({ ...FAST_SERVER, test_server: { board_wait: 60 } });

const work = tempDir("labgate-validation-reserved-");
const stamps = join(work, "stamps");
const gate = (name: string) => join(work, `${name}.go`);
const mark = (name: string) => `[sh, -c, 'echo ${name} >> ${stamps}']`;
/** A case that writes when it begins, waits for its gate file, and writes when it ends. */
const gated = (name: string) => `[sh, -c, 'echo ${name}-begin >> ${stamps}; while [ ! -e ${gate(name)} ]; do sleep 0.1; done; echo ${name}-end >> ${stamps}']`;
const lines = () => readFileSync(stamps, "utf8").split("\n").filter(Boolean);
const progress = async (id: string) => ((await getRun(server, id)).devices as Array<{ status: string }>)[0]!.status;
const member = async (deployment: number) => ((await server.call("GET", `/api/v2/deployments/${deployment}/devices`)).body as Array<{ state: string; output: string | null }>)[0]!;

test("a validation run waits for a reservation made after the install, lets the holder's runs go, then holds the board", async () => {
  writeFileSync(stamps, "");
  await uploadConfig(server, "holder.yml", `tests:\n  g:\n    machines: ["device:res-board"]\n    tests:\n    - exec: {name: holder, command: ${mark("holder")}}\n`);
  await uploadConfig(server, "later.yml", `tests:\n  g:\n    machines: ["device:res-board"]\n    tests:\n    - exec: {name: later, command: ${mark("later")}}\n`);
  await uploadConfig(server, "validate.yml", `tests:\n  smoke:\n  - exec: {name: validate, command: ${gated("validate")}}\n`);
  const image = join(work, "image.bin");
  // The install waits for its gate: the board is reserved while it installs, before its report.
  const install = ["sh", "-c", 'while [ ! -e "$3" ]; do sleep 0.1; done; cp "$1" "$2"', "install", "{file}", image, gate("install")];
  const { id } = await connectedAgent(server, agents, { name: "res-board", device_type: "board", software_version: "v1", update_check_interval: 0.3, install_command: install, tests: { enabled: true } } as AgentOptions);
  const holder = server.token(["tests_rw"], "holder-46v");
  for (const permission of ["read", "test"]) {
    assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "holder-46v", resource: "device", resource_id: id, permission })).status, 200);
  }
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "reserved-boards" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] })).status, 200);
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", validation: { config: "validate.yml" } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deployment = created.body.id as number;
  await waitFor(async () => (await member(deployment)).state === "installing", 20_000, "the agent installing");

  assert.equal((await server.call("POST", `/api/v2/devices/${id}/reservation`, { minutes: 60, note: "looking at the new boot" }, holder)).status, 200);
  writeFileSync(gate("install"), "");
  await waitFor(() => existsSync(image), 20_000, "the agent installed v2");
  const validation = await waitFor(async () => {
    const runs = (await server.call("GET", "/api/v1/test-runs?limit=20")).body as RunObject[];
    return runs.find((r) => r.config_name === "validate.yml");
  }, 20_000, "the validation run");
  assert.equal(await progress(validation.id), "waiting");

  // The holder's own run takes the board past the waiting validation, and ends.
  const own = await server.call("POST", "/api/v1/test-runs", { config_name: "holder.yml" }, holder);
  assert.equal(own.status, 200, JSON.stringify(own.body));
  assert.equal((await waitRun(server, own.body.id as string, undefined, 20_000)).status, "finished");
  assert.deepEqual(lines(), ["holder"], "nothing of the validation ran on the held board");
  assert.equal(await progress(validation.id), "waiting");
  const waiting = await member(deployment);
  assert.equal(waiting.state, "installed", "held for its verdict, not failed");
  assert.equal((await server.call("GET", `/api/v2/deployments/${deployment}`)).body.status, "running", "the deployment waits for the verdict");

  // Released: the validation takes the board and holds it; a run started meanwhile waits for it.
  assert.equal((await server.call("DELETE", `/api/v2/devices/${id}/reservation`, undefined, holder)).status, 200);
  await waitFor(() => lines().includes("validate-begin"), 20_000, "the validation on the board");
  const later = (await server.call("POST", "/api/v1/test-runs", { config_name: "later.yml" }, holder)).body.id as string;
  await waitFor(async () => (await progress(later)) === "waiting", 10_000, "the next run waiting for the validation");
  writeFileSync(gate("validate"), "");
  assert.equal((await waitRun(server, validation.id, undefined, 20_000)).status, "finished");
  assert.equal((await waitRun(server, later, undefined, 20_000)).status, "finished");
  assert.deepEqual(lines(), ["holder", "validate-begin", "validate-end", "later"], "one after the other, never overlapped");
  assert.equal((await member(deployment)).state, "installed");
  // Its verdict was the last thing the deployment waited for.
  await waitFor(async () => (await server.call("GET", `/api/v2/deployments/${deployment}`)).body.status === "completed", 10_000, "the deployment completed");
});
