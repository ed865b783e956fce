/*
 * Issue 29: the audit log's entries for what happens on a device (shell sessions, file fetches)
 * and for Variant B's test-run routes.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import WebSocket from "ws";
import type { Agent } from "../../src/agent/agent.ts";
import { useTestServer, waitFor, type TestServer } from "../helpers/server.ts";
import { FAST_SERVER, connectedAgent as connectedAgentOf, type AgentOptions } from "../update/helpers/agents.ts";
import { uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { entries, newest } from "./helpers.ts";

describe("device sessions", () => {
  const agents: Agent[] = [];
  // Registered first: the agents stop before the server closes.
  after(async () => {
    for (const agent of agents) await agent.stop();
  });
  const server = useTestServer(FAST_SERVER);

  const connectedAgent = (options: AgentOptions = {}) => connectedAgentOf(server, agents, options);

  test("shell.open and shell.close: who, which device, then how long and how many bytes", async () => {
    const { agent, id } = await connectedAgent({ shell: { command: ["sh"], idle_timeout: 30 } });
    const token = server.token(["admin_rw"], "shelly");
    const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/${agent.mac}/shell?token=${token}`);
    let output = "";
    ws.on("message", (data) => (output += data.toString()));
    const closed = new Promise<number>((resolve) => ws.once("close", (code) => resolve(code)));
    await new Promise((resolve, reject) => ws.once("open", resolve).once("error", reject));
    ws.send("echo audited\n");
    await waitFor(() => output === "audited\n", 5000, `shell output (${output})`);
    const open = await newest(server, "shell.open");
    assert.deepEqual([open.actor_kind, open.actor, open.target, open.client, open.detail?.mac], ["token", "shelly", `device:${id}`, "127.0.0.1", agent.mac]);
    assert.equal((await entries(server, "action=shell.close")).length, 0, "no close while it runs");
    ws.send("exit 0\n");
    assert.equal(await closed, 1000);
    const close = await waitFor(async () => (await entries(server, "action=shell.close"))[0], 5000, "shell.close");
    assert.deepEqual([close.actor, close.target, close.detail?.session, close.detail?.code], ["shelly", `device:${id}`, open.detail?.session, 1000]);
    assert.equal(close.detail?.bytes_in, "echo audited\nexit 0\n".length);
    assert.equal(close.detail?.bytes_out, "audited\n".length);
    assert.equal(typeof close.detail?.seconds, "number");
    // A refused shell (no shell permission) is recorded as refused, before any upgrade.
    const reader = server.token(["admin_ro"], "peeker");
    const refused = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/${agent.mac}/shell?token=${reader}`);
    const status = await new Promise<number>((resolve) => {
      refused.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
      refused.once("open", () => resolve(101));
      refused.on("error", () => {});
    });
    assert.equal(status, 403);
    const [denied] = await entries(server, "actor=peeker&outcome=refused");
    assert.deepEqual([denied.action, denied.target], ["auth.refused", "GET /api/v1/devices/:mac/shell"]);
  });

  test("file.fetch: the path asked for and what came of it, found or missing", async () => {
    const { agent, id } = await connectedAgent();
    const file = join(agent.config.file_base_dir, "audit.log");
    writeFileSync(file, "x\n");
    const fetchFile = (path: string) => server.call<{ status: number }>("POST", `/api/v2/devices/${id}/fs/file`, { file: path }, server.token(["admin_rw"], "fetcher"));
    assert.equal((await fetchFile(file)).body.status, 0);
    assert.equal((await fetchFile(join(agent.config.file_base_dir, "missing.log"))).body.status, 1);
    const [missing, found] = await entries(server, `action=file.fetch&target=device:${id}`);
    assert.deepEqual([found.actor, found.detail], ["fetcher", { mac: agent.mac, file, status: 0 }]);
    assert.deepEqual([missing.actor, missing.detail?.status], ["fetcher", 1]);
    // A device hidden from the caller is not asked: nothing to record.
    assert.equal((await server.call("POST", `/api/v2/devices/${id}/fs/file`, { file }, server.token([], "stranger"))).status, 404);
    assert.equal((await entries(server, "actor=stranger")).length, 0);
  });
});

describe("Variant B test-run routes", () => {
  const server: TestServer = useTestServer({ test_server: { api_variant: "B" } });

  test("trigger and abort are recorded like Variant A's, with the run's id and its B number", async () => {
    await uploadConfig(server, "b-slow.yml", "tests:\n  g:\n  - sleep:\n      seconds: 30\n");
    const token = server.token(["tests_rw"], "bea");
    const res = await server.request("/api/v1/test-runs", { method: "POST", token, json: { config_name: "b-slow.yml" } });
    assert.equal(res.status, 200);
    const seq = Number(res.headers.get("location")?.split("/").pop());
    const trigger = await newest(server, "testrun.trigger");
    assert.deepEqual([trigger.actor, trigger.detail?.config, trigger.detail?.seq], ["bea", "b-slow.yml", seq]);
    assert.match(trigger.target, /^run:/);
    await waitRun(server, seq, (r) => r.status === "running");
    assert.equal((await server.request(`/api/v1/test-runs/${seq}`, { method: "DELETE", token })).status, 200);
    const abort = await newest(server, "testrun.abort");
    assert.deepEqual([abort.actor, abort.target, abort.detail?.seq], ["bea", trigger.target, seq]);
    assert.equal((await server.request(`/api/v1/test-runs/${seq}`, { method: "DELETE", token: server.token(["tests_ro"], "bob") })).status, 403);
    assert.equal((await newest(server, "auth.refused")).actor, "bob");
  });
});
