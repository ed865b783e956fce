/*
 * What the agent reports about an offered update (`update_outcome`): the reasons of a failure, A/B
 * installs confirmed (or found rolled back) after a restart, and reports kept on disk until the
 * server acknowledges them.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { NO_INSTALLER } from "../../src/agent/install.ts";
import { OutcomeQueue } from "../../src/agent/outcomes.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, device, FAST_SERVER, restartAgent, startAgent, untilConnected } from "./helpers/agents.ts";
import { offerGroup, uploadOk } from "./helpers/packages.ts";
import { startProxy } from "./helpers/proxy.ts";

const agents: Array<{ stop(): Promise<void> }> = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);

interface History {
  deployment: number | null;
  from_version: string | null;
  to_version: string;
  outcome: string;
  reason: string | null;
}
const historyOf = async (id: number): Promise<History[]> => (await server.call("GET", `/api/v2/devices/${id}/update-history`)).body;
const until = (id: number, outcome: string) => waitFor(async () => (await historyOf(id)).find((h) => h.outcome === outcome), 10_000, `${outcome} in the history of ${id}`);

/**
 * An A/B agent at v1 (devtype `devtype`) whose install writes v2 to `<slot>.next`, approved, in a
 * group offering v2; `versionCommand(slot)` is what it runs after the restart.
 */
async function abAgent(devtype: string, versionCommand: (slot: string) => string[]) {
  const dir = tempDir("labgate-ab-");
  const slot = join(dir, "slot");
  const committed = join(dir, "committed");
  writeFileSync(slot, "v1\n");
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype, file: Buffer.from(`v2 for ${devtype}`) });
  const agent = startAgent(server, {
    device_type: devtype,
    software_version: "v1",
    install_command: ["sh", "-c", 'echo "v2" > "$1.next"', "install", slot],
    version_command: versionCommand(slot),
    commit_command: ["touch", committed],
  });
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  await offerGroup(server, { policy: "exact_match,v2", packages: [pkg.id], devices: [id] });
  return { agent, id, committed };
}

test("A/B: the install waits for the restart; version_command confirms it and commit_command runs", async () => {
  // The "bootloader": after the restart the next slot runs.
  const ab = await abAgent("ab", (slot) => ["sh", "-c", 'if [ -e "$1.next" ]; then mv "$1.next" "$1"; fi; cat "$1"', "version", slot]);
  let agent = ab.agent;
  const { id, committed } = ab;
  await agent.checkNow();
  assert.equal(agent.softwareVersion, "v1", "not before the restart");
  assert.ok(!existsSync(committed));
  // Nothing else happens until then: no second install.
  await agent.checkNow();
  assert.equal((await historyOf(id)).length, 0);

  await agent.stop();
  agent = restartAgent(agent);
  agents.push(agent);
  const installed = await until(id, "installed");
  assert.deepEqual([installed.from_version, installed.to_version], ["v1", "v2"]);
  assert.equal(agent.softwareVersion, "v2");
  assert.ok(existsSync(committed), "commit_command ran");
  await waitFor(async () => (await device(server, id)).metadata["svc.software.version"] === "v2", 10_000, "the new version reported");
});

test("A/B: a device that comes back on the old slot reports failed: rolled back", async () => {
  // The new slot did not boot: the old one runs.
  const ab = await abAgent("ab-bad", (slot) => ["cat", slot]);
  let agent = ab.agent;
  const { id, committed } = ab;
  await agent.checkNow();
  await agent.stop();
  agent = restartAgent(agent);
  agents.push(agent);
  const failed = await until(id, "failed");
  assert.equal(failed.reason, "rolled back: running v1 instead of v2");
  assert.equal(agent.softwareVersion, "v1");
  assert.ok(!existsSync(committed), "nothing committed");
});

test("a download that keeps failing its checksum is reported failed: checksum mismatch", async () => {
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "flaky", file: Buffer.from("x".repeat(5000)) });
  const proxy = await startProxy(server.url, { corrupt: { path: /^\/local_storage\//, times: 100 } });
  const agent = startAgent(proxy.url, { device_type: "flaky", software_version: "v1", install_command: ["true"] });
  agents.push(agent);
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await offerGroup(server, { policy: "exact_match,v2", packages: [pkg.id], devices: [id] });
    await agent.checkNow();
    const failed = await until(id, "failed");
    assert.match(failed.reason!, /^checksum mismatch: 3 downloads did not match/);
    assert.equal(proxy.seen.filter((r) => r.path.startsWith("/local_storage/")).length, 3);
  } finally {
    await agent.stop();
    await proxy.close();
  }
});

test("an agent with no install_command fails the offer at once, in a deployment too, and says it once", async () => {
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "bare", file: Buffer.from("v2 for bare boards") });
  const agent = startAgent(server, { device_type: "bare", software_version: "v1", install_command: [], update_check_interval: 0.1 });
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "bare" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] })).status, 200);
  // A device timeout of a day: a device that said nothing would only end `not_reached` then.
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", device_timeout_minutes: 1440, retries: 0 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const member = await waitFor(
    async () => ((await server.call("GET", `/api/v2/deployments/${created.body.id}/devices`)).body as Array<{ state: string; reason: string | null }>).find((m) => m.state === "failed"),
    10_000,
    "the device failed",
  );
  assert.equal(member.reason, NO_INSTALLER);
  // Later checks get the same offer: no second report.
  for (let i = 0; i < 3; i++) await agent.checkNow();
  assert.deepEqual(
    (await historyOf(id)).map((h) => [h.deployment, h.outcome, h.to_version, h.reason]),
    [[created.body.id, "failed", "v2", NO_INSTALLER]],
  );
});

test("outcome reports stay on disk until acknowledged, and go again on the next connection", () => {
  const dir = tempDir("labgate-outcomes-");
  const sent: object[] = [];
  let online = false;
  const send = (message: object) => (online ? (sent.push(message), true) : false);
  const queue = new OutcomeQueue(dir, send);
  queue.report({ state: "failed", version: "v2", from_version: "v1", reason: "install command exited with 3", output: "boom" });
  assert.equal(sent.length, 0, "offline: nothing sent");
  // A restart of the agent: the report is still there.
  const again = new OutcomeQueue(dir, send);
  assert.equal(again.size, 1);
  online = true;
  again.resend();
  assert.equal(sent.length, 1);
  const message = sent[0] as { method: string; id: string; state: string; reason: string };
  assert.deepEqual([message.method, message.state, message.reason], ["update_outcome", "failed", "install command exited with 3"]);
  again.acknowledged(message.id);
  assert.equal(again.size, 0);
  assert.deepEqual(JSON.parse(readFileSync(join(dir, "outcomes.json"), "utf8")), []);
  assert.equal(new OutcomeQueue(dir, send).size, 0, "an acknowledged report is gone for good");
});
