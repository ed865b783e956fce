import assert from "node:assert/strict";
import { after, test } from "node:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { startTestServer, TestClock, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, b64, disconnecting, FAST_SERVER, rawDevice, restartAgent, startAgent, untilConnected, connectedAgent as connectedAgentOf, type AgentOptions } from "./helpers/agents.ts";
import type { Agent } from "../../src/agent/agent.ts";
import { alive } from "../testrun/run-helpers.ts";

const agents: Agent[] = [];
// Registered first, so it runs first: the agents stop before the server closes.
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);
const admin = () => server.adminToken;

type Entry = { id: string; action: string; created: string; status: string; status_code: number | null; output: string | null; output_truncated: boolean; download_url: string | null };
const log = async (mac: string): Promise<Entry[]> => {
  const res = await server.request(`/api/v2/devices/${mac}/action/log`, { token: admin() });
  assert.equal(res.status, 200);
  return (await res.json()) as Entry[];
};
const exec = (mac: string, action: string, token = admin()) => server.request(`/api/v2/devices/${mac}/action/exec/${action}`, { token });

const connectedAgent = (options: AgentOptions = {}, clock?: TestClock) => connectedAgentOf(server, agents, options, clock ? { clock } : {});

test("an action executed while the device is connected returns its output and exit code; the log keeps it", async () => {
  const { agent } = await connectedAgent();
  const list = await server.request(`/api/v2/devices/${agent.mac}/action/list`, { token: admin() });
  assert.equal(list.status, 200);
  const actions = (await list.json()) as Array<{ action_id: string; action_name: string; command: string[]; timeout: number; description: string }>;
  assert.deepEqual(
    actions.map((a) => a.action_id),
    ["echo", "ok", "svc.builtins.trigger_update_check"],
  );
  assert.deepEqual(actions[1], { action_id: "ok", action_name: "OK", description: "", command: ["echo", "fine"], timeout: 5 });

  const res = await exec(agent.mac, "echo");
  assert.equal(res.status, 200);
  const body = (await res.json()) as { status_code: number; output: string };
  assert.equal(body.status_code, 3);
  assert.equal(Buffer.from(body.output, "base64").toString().split("\n").sort().join(","), ",hello,oops");

  const ok = await exec(agent.mac, "ok");
  assert.deepEqual(await ok.json(), { status_code: 0, output: b64("fine\n") });

  const entries = await log(agent.mac);
  assert.deepEqual(entries.map((e) => [e.action, e.status, e.status_code]), [["ok", "success", 0], ["echo", "error", 3]]);
  assert.match(entries[0].created, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);
  // D8: the entry keeps the output (inline, base64) besides the link of 11.7.
  assert.equal(entries[0].output, b64("fine\n"));
  assert.equal(entries[0].output_truncated, false);
  assert.equal(entries[1].output, body.output);
  // The output is kept under the data dir and downloads through a signed link.
  const output = await fetch(entries[0].download_url!);
  assert.equal(output.status, 200);
  assert.equal(await output.text(), "fine\n");
  const forged = await fetch(entries[0].download_url!.replace(/signature=[^&]+/, "signature=AAAA"));
  assert.equal(forged.status, 403);
});

test("an action queued while the agent is offline runs when it connects: pending -> success/error", async () => {
  let { agent } = await connectedAgent();
  await disconnecting(server, agent.mac, () => agent.stop());

  const first = await exec(agent.mac, "ok");
  assert.equal(first.status, 202);
  assert.deepEqual(await first.json(), {});
  assert.equal((await exec(agent.mac, "echo")).status, 202);
  assert.equal((await exec(agent.mac, "no-such-action")).status, 202);
  assert.deepEqual((await log(agent.mac)).map((e) => [e.action, e.status, e.output]), [["no-such-action", "pending", null], ["echo", "pending", null], ["ok", "pending", null]]);

  agent = restartAgent(agent as Agent & { dir: string });
  agents.push(agent);
  const entries = await waitFor(async () => {
    const list = await log(agent.mac);
    return list.every((e) => e.status === "success" || e.status === "error") ? list : undefined;
  }, 8000, "queued actions to finish");
  assert.deepEqual(entries.map((e) => [e.action, e.status, e.status_code, e.output]), [["no-such-action", "error", null, null], ["echo", "error", 3, entries[1].output], ["ok", "success", 0, b64("fine\n")]]);
  assert.match(Buffer.from(entries[1].output!, "base64").toString(), /hello/);
  assert.ok(entries[2].download_url);
});

test("clear log, clear pending and remove by id", async () => {
  const { agent } = await connectedAgent();
  assert.equal((await exec(agent.mac, "ok")).status, 200);
  assert.equal((await exec(agent.mac, "echo")).status, 200);
  await disconnecting(server, agent.mac, () => agent.stop());
  assert.equal((await exec(agent.mac, "ok")).status, 202);
  assert.equal((await exec(agent.mac, "echo")).status, 202);
  assert.equal((await log(agent.mac)).length, 4);

  const outputUrl = (await log(agent.mac)).find((e) => e.status === "success")!.download_url!;
  let res = await server.request(`/api/v2/devices/${agent.mac}/action/log`, { method: "DELETE", token: admin() });
  assert.deepEqual([res.status, await res.json()], [200, {}]);
  assert.deepEqual((await log(agent.mac)).map((e) => e.status), ["pending", "pending"]);
  assert.equal((await fetch(outputUrl)).status, 404, "the output goes with its entry");

  const [newest, oldest] = await log(agent.mac);
  res = await server.request(`/api/v2/devices/${agent.mac}/action/remove`, { method: "POST", token: admin(), json: { actions: [oldest.id, "not-an-id"] } });
  assert.equal(res.status, 200);
  assert.deepEqual((await log(agent.mac)).map((e) => e.id), [newest.id]);

  for (const bad of [{}, { actions: "x" }, { actions: [1] }, { actions: [], extra: 1 }]) {
    res = await server.request(`/api/v2/devices/${agent.mac}/action/remove`, { method: "POST", token: admin(), json: bad });
    assert.equal(res.status, 400, JSON.stringify(bad));
  }
  assert.equal((await log(agent.mac)).length, 1);

  res = await server.request(`/api/v2/devices/${agent.mac}/action/pending`, { method: "DELETE", token: admin() });
  assert.equal(res.status, 200);
  assert.deepEqual(await log(agent.mac), []);
});

test("a device that does not answer in time: 504 and the log entry becomes error", async () => {
  const slowServer = await startTestServer({ update_server: { ...FAST_SERVER.update_server, action_max_wait: 0.5, device_reply_timeout: 1 } });
  const agent = startAgent(slowServer, { actions: [{ id: "slow", command: ["sleep", "3"], timeout: 0 }] });
  try {
    const id = await approveAgent(slowServer, agent);
    await untilConnected(slowServer, id);
    const res = await slowServer.request(`/api/v2/devices/${agent.mac}/action/exec/slow`, { token: slowServer.adminToken });
    assert.equal(res.status, 504);
    assert.match(((await res.json()) as { error: string }).error, /did not answer/);
    const entries = (await (await slowServer.request(`/api/v2/devices/${agent.mac}/action/log`, { token: slowServer.adminToken })).json()) as Entry[];
    assert.deepEqual(entries.map((e) => e.status), ["error"]);
  } finally {
    await agent.stop();
    await slowServer.close();
  }
});

test("an action timeout on the agent kills the command with its whole process group and reports -1 (error)", async () => {
  // The shell starts a child of its own: killing only the shell would leave the sleep running.
  // A timeout of 20 s on the agent's clock, which the test moves (less than the socket's silence limit, which it moves too).
  const clock = new TestClock();
  const { agent } = await connectedAgent({ actions: [{ id: "hang", command: ["sh", "-c", "sleep 30 & echo $! > hang.pid; wait"], timeout: 20 }] }, clock);
  const answer = exec(agent.mac, "hang");
  const pidFile = join(agent.config.data_dir, "hang.pid");
  const pid = await waitFor(() => (existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").trim()) : 0), 5000, "the shell's child pid");
  await clock.sleepOf(20_000);
  clock.advance(20_000);
  const res = await answer;
  assert.deepEqual(await res.json(), { status_code: -1, output: "" });
  assert.deepEqual((await log(agent.mac)).map((e) => [e.status, e.status_code]), [["error", -1]]);
  await waitFor(() => !alive(pid), 2000, "the shell's child to end");
});

test("unknown action, unknown device, permissions", async () => {
  const { agent, id } = await connectedAgent();
  let res = await exec(agent.mac, "nope");
  assert.equal(res.status, 404);
  assert.deepEqual((await log(agent.mac)).map((e) => e.status), ["error"]);
  res = await exec("ff:ff:ff:ff:ff:fe", "ok");
  assert.deepEqual([res.status, await res.json()], [404, { error: "device does not exist" }]);

  // A user without permissions sees nothing; with read only, cannot execute.
  const user = server.token([], "alice");
  assert.equal((await server.request(`/api/v2/devices/${agent.mac}/action/log`, { token: user })).status, 404);
  assert.equal((await exec(agent.mac, "ok", user)).status, 404);
  const grant = await server.request("/api/v1/permissions", { method: "POST", token: admin(), json: { user_id: "alice", resource: "device", resource_id: id, permission: "read" } });
  assert.equal(grant.status, 200, await grant.clone().text());
  assert.equal((await server.request(`/api/v2/devices/${agent.mac}/action/log`, { token: user })).status, 200);
  assert.equal((await exec(agent.mac, "ok", user)).status, 403);
  assert.equal((await server.request(`/api/v2/devices/${agent.mac}/action/log`, { method: "DELETE", token: user })).status, 403);
  assert.equal((await server.request(`/api/v2/devices/${agent.mac}/action/log`)).status, 401);
});

test("deleting a device closes its socket and drops its action log", async () => {
  const { agent, id } = await connectedAgent();
  assert.equal((await exec(agent.mac, "ok")).status, 200);
  const url = (await log(agent.mac))[0].download_url!;
  const res = await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: admin() });
  assert.equal(res.status, 200);
  await waitFor(() => !agent.connected, 3000, "agent socket closed");
  assert.equal((await server.request(`/api/v2/devices/${agent.mac}/action/log`, { token: admin() })).status, 404);
  assert.equal((await fetch(url)).status, 404);
  // It registers again: a new pending registration appears.
  const pending = await waitFor(async () => {
    const list = (await (await server.request("/api/v1/auth/pending", { token: admin() })).json()) as Array<{ mac_address: string }>;
    return list.some((p) => p.mac_address === agent.mac);
  }, 5000, "new registration");
  assert.ok(pending);
});

test("a device whose queue is full answers `full`; the server asks again and both actions run", async () => {
  // Two at once would find the other's lock directory and fail.
  const { agent } = await connectedAgent({ action_concurrency: 1, actions: [{ id: "nap", command: ["sh", "-c", "mkdir nap.lock && sleep 0.4 && rmdir nap.lock"], timeout: 5 }] });
  const [a, b] = await Promise.all([exec(agent.mac, "nap"), exec(agent.mac, "nap")]);
  assert.deepEqual([a.status, b.status], [200, 200]);
  assert.deepEqual([(await a.json()).status_code, (await b.json()).status_code], [0, 0]);
  assert.deepEqual((await log(agent.mac)).map((e) => e.status), ["success", "success"]);
});

test("with a hand-driven device: missing capability 409, refusal 502, results only for its own executions", async () => {
  const { agent } = await connectedAgent();
  await disconnecting(server, agent.mac, () => agent.stop());
  const dev = await rawDevice(server, agent);
  try {
    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { file_transfer: true } }));
    let res = await exec(agent.mac, "x");
    assert.deepEqual([res.status, await res.json()], [409, { error: "device does not support actions" }]);
    assert.equal((await server.request(`/api/v2/devices/${agent.mac}/action/list`, { token: admin() })).status, 409);

    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: true } }));
    const pending = exec(agent.mac, "x");
    await dev.next("action_list_query");
    dev.ws.send(JSON.stringify({ method: "action_list_update", actions: [{ id: "x", name: "X", command: ["true"], timeout: 1 }] }));
    const sent = await dev.next("action_exec");
    dev.ws.send(JSON.stringify({ method: "action_exec_control", execution_id: sent.execution_id, status: "busy" }));
    res = await pending;
    assert.equal(res.status, 502);

    // A result for an execution of another device, or an unknown one, changes nothing.
    const second = exec(agent.mac, "x");
    const again = await dev.next("action_exec");
    dev.ws.send(JSON.stringify({ method: "action_exec_control", execution_id: again.execution_id, status: "ok" }));
    // D8: acknowledged by the device -> `sent` until the result comes.
    await waitFor(async () => (await log(agent.mac)).find((e) => e.id === again.execution_id)?.status === "sent", 3000, "status sent");
    dev.ws.send(JSON.stringify({ method: "action_exec_result", execution_id: "00000000-0000-4000-8000-000000000000", status_code: 0, output: "" }));
    dev.ws.send(JSON.stringify({ method: "action_exec_result", execution_id: again.execution_id, status_code: 0, output: b64("done") }));
    assert.deepEqual(await (await second).json(), { status_code: 0, output: b64("done") });
    // A duplicate result (at-least-once delivery) leaves the first one standing (checked below,
    // once the device's next result, sent after it, has been answered).
    dev.ws.send(JSON.stringify({ method: "action_exec_result", execution_id: again.execution_id, status_code: 5, output: "" }));

    // An entry removed while its request waits: the request still gets the device's result.
    const third = exec(agent.mac, "x");
    const running = await dev.next("action_exec");
    dev.ws.send(JSON.stringify({ method: "action_exec_control", execution_id: running.execution_id, status: "ok" }));
    const removed = await server.request(`/api/v2/devices/${agent.mac}/action/remove`, { method: "POST", token: admin(), json: { actions: [running.execution_id] } });
    assert.equal(removed.status, 200);
    dev.ws.send(JSON.stringify({ method: "action_exec_result", execution_id: running.execution_id, status_code: 0, output: b64("late") }));
    const answer = await third;
    assert.deepEqual([answer.status, await answer.json()], [200, { status_code: 0, output: b64("late") }]);
    assert.deepEqual((await log(agent.mac)).map((e) => [e.status, e.status_code]), [["success", 0], ["error", null], ["error", null]]);
  } finally {
    dev.ws.close();
  }
});

test("actions run without a shell: metacharacters reach the program as they are", async () => {
  const { agent } = await connectedAgent({ actions: [{ id: "literal", command: ["echo", "$HOME", "|", "`id`", ";", "$(id)"], timeout: 5 }] });
  const res = await exec(agent.mac, "literal");
  assert.deepEqual(await res.json(), { status_code: 0, output: b64("$HOME | `id` ; $(id)\n") });
});

test("queued actions go out oldest first, and again after a disconnect before their results (at least once)", async () => {
  const { agent } = await connectedAgent();
  await disconnecting(server, agent.mac, () => agent.stop());
  for (const action of ["a", "b", "c"]) assert.equal((await exec(agent.mac, action)).status, 202);
  const ids = (await log(agent.mac)).map((e) => e.id).reverse(); // oldest first

  const session = async (answer: boolean) => {
    const dev = await rawDevice(server, agent);
    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: true } }));
    await dev.next("action_list_query");
    dev.ws.send(JSON.stringify({ method: "action_list_update", actions: ["a", "b", "c"].map((x) => ({ id: x, command: ["true"] })) }));
    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      const sent = await dev.next("action_exec");
      order.push(String(sent.execution_id));
      dev.ws.send(JSON.stringify({ method: "action_exec_control", execution_id: sent.execution_id, status: "ok" }));
      if (answer) dev.ws.send(JSON.stringify({ method: "action_exec_result", execution_id: sent.execution_id, status_code: i, output: "" }));
    }
    return { dev, order };
  };
  // First connection: taken (sent) but no result before the device goes away.
  const first = await session(false);
  assert.deepEqual(first.order, ids);
  await waitFor(async () => (await log(agent.mac)).every((e) => e.status === "sent"), 3000, "all sent");
  await disconnecting(server, agent.mac, () => first.dev.ws.close());
  // Next connection: the same executions again, same order; now they finish.
  const second = await session(true);
  assert.deepEqual(second.order, ids);
  await waitFor(async () => (await log(agent.mac)).every((e) => e.status !== "sent"), 3000, "all done");
  assert.deepEqual((await log(agent.mac)).map((e) => [e.action, e.status, e.status_code]), [["c", "error", 2], ["b", "error", 1], ["a", "success", 0]]);
  second.dev.ws.close();
});

test("a large output: whole in the exec answer and behind the link, the first 64 KiB inline in the log", async () => {
  const { agent } = await connectedAgent({ actions: [{ id: "big", command: ["head", "-c", "100000", "/dev/zero"], timeout: 5 }] });
  const res = await exec(agent.mac, "big");
  const body = (await res.json()) as { status_code: number; output: string };
  assert.equal(Buffer.from(body.output, "base64").length, 100_000);
  const [entry] = await log(agent.mac);
  assert.equal(Buffer.from(entry.output!, "base64").length, 64 * 1024);
  assert.equal(entry.output_truncated, true);
  assert.equal((await (await fetch(entry.download_url!)).arrayBuffer()).byteLength, 100_000);
});

test("clear pending empties the queue, also of actions handed over before a disconnect (nothing is sent again)", async () => {
  const { agent } = await connectedAgent();
  await disconnecting(server, agent.mac, () => agent.stop());
  for (const action of ["a", "b"]) assert.equal((await exec(agent.mac, action)).status, 202);
  let dev = await rawDevice(server, agent);
  dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: true } }));
  await dev.next("action_list_query");
  dev.ws.send(JSON.stringify({ method: "action_list_update", actions: [{ id: "a", command: ["true"] }, { id: "b", command: ["true"] }] }));
  for (let i = 0; i < 2; i++) {
    const sent = await dev.next("action_exec");
    dev.ws.send(JSON.stringify({ method: "action_exec_control", execution_id: sent.execution_id, status: "ok" }));
  }
  await waitFor(async () => (await log(agent.mac)).every((e) => e.status === "sent"), 3000, "sent");
  await disconnecting(server, agent.mac, () => dev.ws.close());
  const res = await server.request(`/api/v2/devices/${agent.mac}/action/pending`, { method: "DELETE", token: admin() });
  assert.equal(res.status, 200);
  assert.deepEqual(await log(agent.mac), []);
  dev = await rawDevice(server, agent);
  try {
    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: true } }));
    // A new execution goes out, and it is the first the device gets: nothing cleared went before it.
    const fresh = exec(agent.mac, "a");
    await dev.next("action_list_query");
    dev.ws.send(JSON.stringify({ method: "action_list_update", actions: [{ id: "a", command: ["true"] }] }));
    const sent = await dev.next("action_exec");
    assert.equal(sent.execution_id, (await log(agent.mac))[0].id);
    assert.deepEqual(dev.messages.filter((m) => m.method === "action_exec"), []);
    dev.ws.send(JSON.stringify({ method: "action_exec_control", execution_id: sent.execution_id, status: "ok" }));
    dev.ws.send(JSON.stringify({ method: "action_exec_result", execution_id: sent.execution_id, status_code: 0, output: "" }));
    assert.equal((await fresh).status, 200);
  } finally {
    dev.ws.close();
  }
});
