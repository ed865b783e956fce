/*
 * Issue 25: a session (or a token of an account's name) acts with the account's current scopes
 * and permissions. Each change (scope cut, permission removal, new password, disabling,
 * deletion) takes effect on the next request and ends each kind of long-lived connection: the
 * event stream /api/stream, the test-run stream and a shell.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import WebSocket from "ws";
import type { Agent } from "../../src/agent/agent.ts";
import { openStream, type EventStream } from "../helpers/events.ts";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, rawDevice, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { signIn } from "./helpers.ts";

let shellAgent: Agent;
const agents: Agent[] = [];
/** Long enough for the watch's once-a-second check on a loaded machine; a pass takes about a second. */
const ENDS_WITHIN = 4000;

// Registered before the server: the agents stop before it closes.
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER, async (server) => {
  shellAgent = startAgent(server, { shell: { command: ["sh"], idle_timeout: 30, max_sessions: 16 } });
  agents.push(shellAgent);
  await untilConnected(server, await approveAgent(server, shellAgent));
});

let accounts = 0;
/** A new account with `scopes` (prefixed names); its session token (the cookie's value) and a token issued for its name. */
async function account(scopes: string[]): Promise<{ name: string; session: string; token: string }> {
  const name = `acct${++accounts}`;
  const created = await server.call("POST", "/api/v1/users", { name, password: `${name}-password`, scopes });
  assert.equal(created.status, 201);
  const cookie = await signIn(server, name, `${name}-password`);
  return { name, session: cookie.slice("labgate_session=".length), token: server.token(["admin_rw"], name) };
}

interface Shell {
  open: Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

function openShell(mac: string, token: string): Shell {
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/${mac}/shell?token=${token}`);
  ws.on("error", () => {});
  const open = new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("unexpected-response", (_req, res) => reject(new Error(`shell refused: ${res.statusCode}`)));
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  return { open, closed };
}

/** Resolves with what `promise` gives, or fails after ENDS_WITHIN ms naming `what`. */
function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_resolve, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not end within ${ENDS_WITHIN} ms`)), ENDS_WITHIN)));
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

interface Connections {
  events: EventStream;
  runs: EventStream;
  shell: Shell;
}

async function connect(token: string): Promise<Connections> {
  const events = await openStream(server, token);
  const runs = await openStream(server, token, "/api/v1/test-runs/stream");
  const shell = openShell(shellAgent.mac, token);
  assert.equal(events.status, 200);
  assert.equal(runs.status, 200);
  await shell.open;
  return { events, runs, shell };
}

/** Every connection ends on its own (the server closes it), with `reason`. */
async function allEnd(connections: Connections, reason: RegExp): Promise<void> {
  const [events, runs, shell] = await Promise.all([
    within(connections.events.ended, "the event stream"),
    within(connections.runs.ended, "the test-run stream"),
    within(connections.shell.closed, "the shell"),
  ]);
  assert.match(events, reason);
  assert.match(runs, reason);
  assert.equal(shell.code, 4000);
  assert.match(shell.reason, reason);
}

const createAccountWith = (token: string) => server.request("/api/v1/users", { method: "POST", token, json: { name: `made${++accounts}`, password: "made-password", scopes: [] } });

describe("account changes reach live sessions and tokens", () => {
  test("a scope cut: the next request acts with the new scopes; streams and shells end", async () => {
    const { name, session, token } = await account(["svc_admin_rw"]);
    assert.equal((await createAccountWith(session)).status, 201, "admin_rw before the cut");
    const bySession = await connect(session);
    const byToken = await connect(token);
    assert.equal((await server.call("PATCH", `/api/v1/users/${name}`, { scopes: ["svc_tests_ro"] })).status, 200);
    for (const credential of [session, token]) {
      assert.equal((await createAccountWith(credential)).status, 403, "no admin account from a cut session or token");
      const whoami = await server.call("GET", "/api/whoami", undefined, credential);
      assert.deepEqual(whoami.body.scopes, ["svc_tests_ro"]);
    }
    await allEnd(bySession, /the account's scopes have changed/);
    await allEnd(byToken, /the account's scopes have changed/);
    // Opened again, they follow the new scopes: the test-run stream yes, the shell no.
    const runs = await openStream(server, session, "/api/v1/test-runs/stream");
    assert.equal(runs.status, 200);
    runs.close();
    const hidden = openShell(shellAgent.mac, session);
    assert.equal((await hidden.closed).code, 4001, "the device is hidden from the account now");
  });

  test("a scope added applies to sessions at once, and a token keeps no more than its own scopes", async () => {
    const { name, session } = await account(["svc_tests_ro"]);
    const narrow = server.token(["tests_ro"], name);
    assert.equal((await createAccountWith(session)).status, 403);
    assert.equal((await server.call("PATCH", `/api/v1/users/${name}`, { scopes: ["svc_admin_rw"] })).status, 200);
    assert.equal((await createAccountWith(session)).status, 201, "the session has the account's scopes now");
    assert.equal((await createAccountWith(narrow)).status, 403, "the token has its own scopes, not more");
  });

  test("a new password ends sessions on the next request, and their streams and shells", async () => {
    const { name, session } = await account(["svc_admin_rw"]);
    const live = await connect(session);
    assert.equal((await server.call("PATCH", `/api/v1/users/${name}`, { password: "another-password" })).status, 200);
    assert.equal((await server.call("GET", "/api/whoami", undefined, session)).status, 401);
    await allEnd(live, /session has ended/);
  });

  test("disabling ends sessions and the name's tokens, and their streams and shells", async () => {
    const { name, session, token } = await account(["svc_admin_rw"]);
    const bySession = await connect(session);
    const byToken = await connect(token);
    assert.equal((await server.call("PATCH", `/api/v1/users/${name}`, { disabled: true })).status, 200);
    assert.equal((await server.call("GET", "/api/whoami", undefined, session)).status, 401);
    assert.equal((await server.call("GET", "/api/whoami", undefined, token)).status, 401);
    await allEnd(bySession, /session has ended/);
    await allEnd(byToken, /the account is disabled/);
    // A token issued for the name while it is disabled does not work either.
    const later = await server.call("GET", "/api/whoami", undefined, server.token(["admin_rw"], name));
    assert.deepEqual([later.status, later.body], [401, { error: "the account is disabled" }]);
  });

  test("deleting an account ends its sessions and tokens, and their streams and shells; its permissions go", async () => {
    const { name, session, token } = await account(["svc_admin_rw"]);
    const grant = await server.call("POST", "/api/v1/permissions", { user_id: name, resource: "device_by_tag", resource_name: "lab", permission: "read" });
    assert.equal(grant.status, 200);
    const bySession = await connect(session);
    const byToken = await connect(token);
    const removed = await server.request(`/api/v1/users/${name}`, { method: "DELETE", token: server.adminToken });
    assert.equal(removed.status, 204);
    assert.equal((await server.call("GET", "/api/whoami", undefined, session)).status, 401);
    assert.equal((await server.call("GET", "/api/whoami", undefined, token)).status, 401);
    await allEnd(bySession, /session has ended/);
    await allEnd(byToken, /token has been revoked/);
    const left = await server.call("GET", "/api/v1/permissions");
    assert.equal((left.body as Array<{ user_id: string }>).filter((p) => p.user_id === name).length, 0);
    assert.equal((await server.request(`/api/v1/users/${name}`, { method: "DELETE", token: server.adminToken })).status, 404);
  });

  test("deleting: admin_rw only, not yourself (the last admin stays, as for disabling: users.test.ts)", async () => {
    const { name, session } = await account(["svc_admin_ro"]);
    assert.equal((await server.request(`/api/v1/users/${name}`, { method: "DELETE", token: session })).status, 403);
    const self = await server.request("/api/v1/users/admin", { method: "DELETE", token: server.token(["admin_rw"], "admin") });
    assert.equal(self.status, 409);
    assert.match(((await self.json()) as { error: string }).error, /your own account/);
  });

  test("a permission removed: the next request is refused, the shell ends, the stream stops showing the device", async () => {
    const { name: user, session } = await account([]);
    // Two devices the user may read (the stream's events come from their raw sockets), and a shell on the agent's.
    const silent: Agent[] = [startAgent(server), startAgent(server)];
    agents.push(...silent);
    const ids = [];
    for (const agent of silent) {
      ids.push(await approveAgent(server, agent));
      await agent.stop();
    }
    const shellId = (await server.call("GET", `/api/v2/devices?q=${encodeURIComponent(shellAgent.mac)}&limit=1`)).body[0].id as number;
    const grants: number[] = [];
    for (const [resource_id, permission] of [[ids[0], "read"], [ids[1], "read"], [shellId, "read"], [shellId, "shell"]] as const) {
      const granted = await server.call("POST", "/api/v1/permissions", { user_id: user, resource: "device", resource_id, permission });
      assert.equal(granted.status, 200);
      grants.push(granted.body.id as number);
    }
    const events = await openStream(server, session);
    const shell = openShell(shellAgent.mac, session);
    await shell.open;
    const devices = await Promise.all(silent.map((agent) => rawDevice(server, agent)));
    devices[0].ws.send(JSON.stringify({ method: "update_progress", progress: 10 }));
    await events.next((e) => e.data.device === silent[0].mac && e.data.progress === 10, 3000, "the first device's event");

    for (const id of [grants[0], grants[3]]) assert.equal((await server.request(`/api/v1/permissions/${id}`, { method: "DELETE", token: server.adminToken })).status, 200);
    assert.equal((await server.call("GET", `/api/v2/devices/${ids[0]}`, undefined, session)).status, 404, "the next request");
    const closed = await within(shell.closed, "the shell");
    assert.deepEqual(closed, { code: 4000, reason: "insufficient permission to a resource" });
    devices[0].ws.send(JSON.stringify({ method: "update_progress", progress: 20 }));
    devices[1].ws.send(JSON.stringify({ method: "update_progress", progress: 30 }));
    await events.next((e) => e.data.device === silent[1].mac && e.data.progress === 30, 3000, "the second device's event");
    assert.ok(!events.events.some((e) => e.data.device === silent[0].mac && e.data.progress === 20), "nothing of the first device after the removal");
    events.close();
    for (const device of devices) device.ws.close();
  });
});
