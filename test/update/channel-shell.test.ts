import assert from "node:assert/strict";
import { after, test } from "node:test";
import WebSocket from "ws";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { device, disconnecting, FAST_SERVER, rawDevice, connectedAgent as connectedAgentOf, type AgentOptions } from "./helpers/agents.ts";
import type { Agent } from "../../src/agent/agent.ts";

const agents: Agent[] = [];
// Registered first: the agents stop before the server closes (and its data dir goes).
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);

interface Socket {
  ws: WebSocket;
  status: Promise<number>;
  closed: Promise<{ code: number; reason: string }>;
  frames: Array<{ data: Buffer; binary: boolean }>;
  text: () => string;
  /** Resolves with `check`'s first truthy answer, looked at now and as each frame arrives; fails after `ms`. */
  until<T>(check: () => T, what: string, ms?: number): Promise<NonNullable<T>>;
}

/** A WebSocket to `path`; `status` is 101 once open, else the HTTP status of the refusal. */
function socket(path: string, headers: Record<string, string> = {}): Socket {
  const ws = new WebSocket(`${server.url.replace("http", "ws")}${path}`, { headers });
  const frames: Socket["frames"] = [];
  ws.on("message", (data, binary) => frames.push({ data: data as Buffer, binary }));
  ws.on("error", () => {});
  const status = new Promise<number>((resolve) => {
    ws.once("open", () => resolve(101));
    ws.once("unexpected-response", (_req, res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  const text = () => Buffer.concat(frames.map((f) => f.data)).toString();
  const until = <T>(check: () => T, what: string, ms = 5000) =>
    new Promise<NonNullable<T>>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        ws.off("message", look);
      };
      const timer = setTimeout(() => (done(), reject(new Error(`timed out waiting for ${what} (received ${JSON.stringify(text())})`))), ms);
      // After the listener that keeps the frames: the new one is among them.
      const look = () => {
        const value = check();
        if (value) done(), resolve(value as NonNullable<T>);
      };
      ws.on("message", look);
      look();
    });
  return { ws, status, closed, frames, text, until };
}

const shell = (mac: string, token = server.adminToken, via: "query" | "header" = "query") =>
  via === "query" ? socket(`/api/v1/devices/${mac}/shell?token=${token}`) : socket(`/api/v1/devices/${mac}/shell`, { authorization: `Bearer token=${token}` });

const connectedAgent = (options: AgentOptions = {}) => connectedAgentOf(server, agents, options);

const SHELL = { shell: { command: ["sh"], idle_timeout: 30 } };

test("a manager's shell reaches the agent's configured process: input in, output back, exit closes the socket", async () => {
  process.env.LABGATE_TEST_SECRET = "agent-only";
  const { agent, id } = await connectedAgent(SHELL);
  assert.equal((await device(server, id)).capabilities.shell_connect, true);
  const s = shell(agent.mac);
  assert.equal(await s.status, 101);
  // Typed before the device attached: held and delivered in order.
  s.ws.send("echo hello; pwd\n");
  s.ws.send(Buffer.from('echo "[$LABGATE_TEST_SECRET]"\n'), { binary: true });
  await s.until(() => s.text().includes("]\n"), "shell output");
  assert.equal(s.text(), `hello\n${agent.config.file_base_dir}\n[]\n`, "cwd is file_base_dir, the agent's environment stays out");
  assert.ok(s.frames.every((f) => f.binary), "process output arrives as binary frames");
  s.ws.send("exit 3\n");
  assert.deepEqual(await s.closed, { code: 1000, reason: "exit 3" });
});

test("shell access: a token in the header or the query, the shell permission (2.7), 401/403 before any upgrade", async () => {
  const { agent, id } = await connectedAgent(SHELL);
  assert.equal(await socket(`/api/v1/devices/${agent.mac}/shell`).status, 401);
  assert.equal(await shell(agent.mac, "not-a-token").status, 401);
  // An unknown device is upgraded and closed with 4001 and a reason, as the reference does (a
  // browser cannot read an HTTP status on a WebSocket); a device the user cannot read looks the same.
  const unknown = shell("ff:ff:ff:ff:ff:fd");
  assert.equal(await unknown.status, 101);
  assert.deepEqual(await unknown.closed, { code: 4001, reason: "device ff:ff:ff:ff:ff:fd not connected to the management WS" });
  const user = server.token([], "dora");
  const hidden = shell(agent.mac, user);
  assert.equal(await hidden.status, 101);
  assert.deepEqual(await hidden.closed, { code: 4001, reason: `device ${agent.mac} not connected to the management WS` }, "a device the user cannot read is hidden");
  const grant = (permission: string) =>
    server.request("/api/v1/permissions", { method: "POST", token: server.adminToken, json: { user_id: "dora", resource: "device", resource_id: id, permission } });
  assert.equal((await grant("read")).status, 200);
  assert.equal(await shell(agent.mac, user).status, 403);
  assert.equal(await shell(agent.mac, server.token(["admin_ro"], "ro")).status, 403, "admin read is not shell");
  assert.equal((await grant("shell")).status, 200);
  const s = shell(agent.mac, user, "header");
  assert.equal(await s.status, 101);
  s.ws.send("echo ok\n");
  await s.until(() => s.text() === "ok\n", "shell output");
  s.ws.close();
  // A plain GET is told what the route wants.
  const plain = await server.request(`/api/v1/devices/${agent.mac}/shell`, { token: server.adminToken });
  assert.equal(plain.status, 426);
});

test("a device that is offline (4001), lacks the capability (4003) or never attaches (4001 after the timeout)", async () => {
  const { agent, id } = await connectedAgent();
  // The default agent has no shell command: it does not offer shell sessions.
  assert.equal((await device(server, id)).capabilities.shell_connect, false);
  let s = shell(agent.mac);
  assert.deepEqual(await s.closed, { code: 4003, reason: "shell attach request failed: device does not support the required method: shell_attach" });

  await disconnecting(server, agent.mac, () => agent.stop());
  s = shell(agent.mac);
  assert.deepEqual(await s.closed, { code: 4001, reason: `device ${agent.mac} not connected to the management WS` });

  const dev = await rawDevice(server, agent);
  try {
    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { shell_connect: true } }));
    s = shell(agent.mac);
    const attach = await dev.next("shell_attach");
    assert.equal(attach.mac_addr, agent.mac);
    assert.match(String(attach.uuid), /^[0-9a-f-]{36}$/);
    assert.deepEqual(await s.closed, { code: 4001, reason: "device did not connect within 1s" });
    // Too late: the session is gone.
    const late = socket(`/api/v1/devices/${agent.mac}/shell/attach/${attach.uuid}`, { authorization: `Bearer token=${dev.token}` });
    assert.deepEqual(await late.closed, { code: 4001, reason: "invalid shell session identifier" });
  } finally {
    dev.ws.close();
  }
});

test("attach: only the device of the path (17.4), only an open session, once; frames relayed unchanged both ways", async () => {
  const { agent } = await connectedAgent();
  const { agent: other } = await connectedAgent();
  await disconnecting(server, agent.mac, () => agent.stop());
  const dev = await rawDevice(server, agent);
  // The other agent is connected: this second socket is refused (4002), but its token is real.
  const otherToken = (await rawDevice(server, other)).token;
  try {
    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { shell_connect: true } }));
    const s = shell(agent.mac);
    assert.equal(await s.status, 101);
    const { uuid } = await dev.next("shell_attach");
    const attachPath = `/api/v1/devices/${agent.mac}/shell/attach/${uuid}`;
    const auth = (token: string) => ({ authorization: `Bearer token=${token}` });

    assert.equal(await socket(attachPath).status, 401);
    assert.equal(await socket(attachPath, { authorization: `Bearer token=${server.adminToken}` }).status, 401, "a management token is not a device token");
    assert.equal(await socket(attachPath, auth(otherToken)).status, 403, "another device's token");
    const wrong = socket(`/api/v1/devices/${agent.mac}/shell/attach/00000000-0000-4000-8000-000000000000`, auth(dev.token));
    assert.deepEqual(await wrong.closed, { code: 4001, reason: "invalid shell session identifier" });

    const d = socket(attachPath, auth(dev.token));
    assert.equal(await d.status, 101);
    const twice = socket(attachPath, auth(dev.token));
    assert.deepEqual(await twice.closed, { code: 4001, reason: "invalid shell session identifier" });

    s.ws.send("typed");
    s.ws.send(Buffer.from([0, 1, 2, 255]), { binary: true });
    await d.until(() => d.frames.length === 2, "manager frames at the device", 3000);
    assert.deepEqual(d.frames.map((f) => [f.binary, [...f.data]]), [[false, [...Buffer.from("typed")]], [true, [0, 1, 2, 255]]]);
    d.ws.send(Buffer.from([9, 8, 7]), { binary: true });
    d.ws.send("prompt$ ");
    await s.until(() => s.frames.length === 2, "device frames at the manager", 3000);
    assert.deepEqual(s.frames.map((f) => [f.binary, [...f.data]]), [[true, [9, 8, 7]], [false, [...Buffer.from("prompt$ ")]]]);

    // Either side closing closes the other.
    s.ws.close(1000, "bye");
    assert.deepEqual(await d.closed, { code: 1000, reason: "bye" });
  } finally {
    dev.ws.close();
  }
});

test("deleting the device ends its shell sessions and the agent's process", async () => {
  const { agent, id } = await connectedAgent(SHELL);
  const s = shell(agent.mac);
  assert.equal(await s.status, 101);
  s.ws.send("echo $$\n");
  const pid = Number(await s.until(() => /^(\d+)\n$/.exec(s.text())?.[1], "shell pid"));
  assert.ok(pid > 0);
  assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: server.adminToken })).status, 200);
  const closed = await s.closed;
  assert.equal(closed.code, 4001);
  const gone = () => {
    try {
      process.kill(pid, 0);
      return false;
    } catch {
      return true;
    }
  };
  await waitFor(gone, 5000, "shell process ended");
});

test("a shell command that cannot start ends the session with the reason (cut to a valid close reason)", async () => {
  const missing = `/nonexistent/${"é".repeat(100)}`;
  const { agent } = await connectedAgent({ shell: { command: [missing] } });
  const s = shell(agent.mac);
  const closed = await s.closed;
  assert.equal(closed.code, 1000);
  assert.match(closed.reason, /^cannot start the shell: spawn \/nonexistent\/é+/);
  assert.ok(Buffer.byteLength(closed.reason) <= 123);
  assert.equal(agent.connected, true, "the agent lives on");
});

test("a shell session without traffic for the agent's idle timeout is closed", async () => {
  const { agent } = await connectedAgent({ shell: { command: ["sh"], idle_timeout: 0.4 } });
  const s = shell(agent.mac);
  assert.equal(await s.status, 101);
  s.ws.send("echo awake\n");
  await s.until(() => s.text() === "awake\n", "shell output");
  assert.deepEqual(await s.closed, { code: 1000, reason: "idle timeout" });
});

test("a shell session ends when the manager's token is revoked or expires (issue 10)", async () => {
  const { agent } = await connectedAgent(SHELL);
  const token = server.token(["admin_rw"], "shell-revoked");
  const s = shell(agent.mac, token);
  assert.equal(await s.status, 101);
  s.ws.send("echo up\n");
  await s.until(() => s.text().includes("up\n"), "shell output");
  const { id } = (await (await server.request("/api/whoami", { token })).json()) as { id: string };
  assert.equal((await server.request("/api/v1/tokens/revoke", { method: "POST", token: server.adminToken, json: { id } })).status, 200);
  assert.deepEqual(await s.closed, { code: 4000, reason: "token has been revoked" });
  const short = shell(agent.mac, server.token(["admin_rw"], "shell-short", 60), "header");
  assert.equal(await short.status, 101);
  // The device attached (its attach deadline is on the same clock, and would end the session first).
  short.ws.send("echo attached\n");
  await short.until(() => short.text().includes("attached\n"), "shell output");
  server.clock.advance(61_000);
  assert.deepEqual(await short.closed, { code: 4000, reason: "token has expired" });
});

test("input before the device attaches is bounded in bytes, not frames: more than 64 KiB closes the manager's socket", async () => {
  const { agent } = await connectedAgent();
  await disconnecting(server, agent.mac, () => agent.stop());
  // A device that has not reported its capabilities yet: the route waits for them, holding input.
  const dev = await rawDevice(server, agent);
  try {
    const s = shell(agent.mac);
    assert.equal(await s.status, 101);
    for (let i = 0; i < 3; i++) s.ws.send(Buffer.alloc(30 * 1024, i), { binary: true });
    assert.deepEqual(await s.closed, { code: 4001, reason: "too much input before the device attached" });
  } finally {
    dev.ws.close();
  }
});
