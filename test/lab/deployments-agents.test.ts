/*
 * Deployments on boards with real `labgate agent`s (issue 46): a board whose install does not
 * come back until it is power-cycled is cycled by `recover`, prints its boot, and then reports
 * installed, its attempt's console span holding both; a reserved board's agent is offered nothing
 * while a free one installs, and installs once the reservation is released. The hand-driven cases
 * of recover.test.ts and deployments.test.ts keep the edge timings.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { connectedAgent, FAST_SERVER } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { labConfig, serialPair, type SerialPair } from "./helpers.ts";

const DAY = 86400;
const dir = tempDir("labgate-lab-agents-");
/** Made by the board's power port when it is switched on: the install waits for it, as a board that hangs until cycled. */
const cycled = join(dir, "cycled");
const agents: Agent[] = [];
let tty: SerialPair;
after(async () => {
  for (const agent of agents) await agent.stop();
  await tty?.close();
});
const server = useTestServer(async () => {
  tty = await serialPair(dir, "ttyUSB0");
  const on = ["sh", "-c", `touch ${cycled}; printf 'board-7 login:\\r\\n' > ${tty.board}`];
  return { ...FAST_SERVER, lab: labConfig([{ device: "rec-board", serial: { port: tty.port }, power: { driver: "command", on, off: ["true"], delay: 0 } }], { console_after_outcome: 2 }) };
});
const deployments = () => server.server.domains.update.deployments;
const members = async (deployment: number) => new Map(((await server.call("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body as Array<{ device: number; state: string }>).map((m) => [m.device, m.state]));

async function deploy(name: string, ids: number[], extra: Record<string, unknown> = {}): Promise<number> {
  const pkg = (await uploadOk(server, { token: server.adminToken, version: `v2-${name}`, devtype: "board", file: Buffer.from(`v2 for ${name}`) })).id;
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: ids, remove: [] })).status, 200);
  const created = await server.call("POST", "/api/v2/deployments", { group, version: `v2-${name}`, device_timeout_minutes: 60, ...extra });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return created.body.id as number;
}

test("a board whose install hangs until it is power-cycled is cycled by recover, boots, and its agent reports installed; the attempt's span holds the install and the boot", async () => {
  const image = join(dir, "rec-image.bin");
  const install = ["sh", "-c", 'cp "$1" "$2"; printf "Writing v2 to mmcblk0p2\\r\\n" > "$3"; while [ ! -e "$4" ]; do sleep 0.1; done', "install", "{file}", image, tty.board, cycled];
  const { id } = await connectedAgent(server, agents, { name: "rec-board", device_type: "board", software_version: "v1", update_check_interval: 0.3, install_command: install });
  const deployment = await deploy("recover", [id], { recover: { power_cycle_after_minutes: 2 } });
  await waitFor(() => existsSync(image), 20_000, "the agent installing");
  await waitFor(async () => (await members(deployment)).get(id) === "installing", 10_000, "installing reported");

  await deployments().tick();
  server.clock.advance(121_000);
  await deployments().tick();
  await deployments().recoveriesSettled();
  assert.ok(existsSync(cycled), "the board was power-cycled");
  await waitFor(async () => (await members(deployment)).get(id) === "installed", 20_000, "installed after the cycle");

  // The board may report before the cycle's own row is written (it came back as the PDU answered).
  const history = (await server.call("GET", `/api/v2/devices/${id}/update-history`)).body as Array<{ id: number; outcome: string }>;
  assert.deepEqual(history.map((h) => h.outcome).sort(), ["installed", "power_cycle"]);
  const installed = history.find((h) => h.outcome === "installed")!;
  server.clock.advance(3_000);
  const span = await waitFor(async () => {
    const res = await server.request(`/api/v2/devices/${id}/update-history/${installed.id}/console`, { token: server.adminToken });
    return res.status === 200 ? res.text() : undefined;
  }, 10_000, "the attempt's span");
  assert.ok(span.includes("Writing v2") && span.includes("login:"), span);
});

test("a reserved board's agent is offered nothing while a free one installs, and installs once released", async () => {
  const image = (name: string) => join(dir, `${name}.bin`);
  const options = (name: string) => ({ name, device_type: "board", software_version: "v1", update_check_interval: 0.3, install_command: ["sh", "-c", 'cp "$1" "$2"', "install", "{file}", image(name)] });
  const held = await connectedAgent(server, agents, options("held-board"));
  const free = await connectedAgent(server, agents, options("free-board"));
  for (const permission of ["read", "test"]) {
    assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "holder-46", resource: "device", resource_id: held.id, permission })).status, 200);
  }
  const holder = server.token(["tests_rw"], "holder-46", 30 * DAY);
  assert.equal((await server.call("POST", `/api/v2/devices/${held.id}/reservation`, { minutes: 120 }, holder)).status, 200);

  const deployment = await deploy("reserved", [held.id, free.id]);
  await waitFor(async () => (await members(deployment)).get(free.id) === "installed", 20_000, "the free board installed");
  await deployments().tick();
  assert.equal((await members(deployment)).get(held.id), "reserved");
  assert.equal(existsSync(image("held-board")), false, "the held board's agent got nothing");

  assert.equal((await server.call("DELETE", `/api/v2/devices/${held.id}/reservation`, undefined, holder)).status, 200);
  await waitFor(async () => (await members(deployment)).get(held.id) === "installed", 20_000, "installed after the release");
  assert.ok(existsSync(image("held-board")));
});
