/*
 * On PostgreSQL other requests run while a transaction waits between its statements (on the
 * embedded engine nothing does), and SERIALIZABLE transactions that conflict are run again. A
 * transaction held open on purpose (a row lock taken from a connection of the test's own) must
 * not show a request made meanwhile a change it has not committed; and many clients writing one
 * table at once are all answered, none left to fail after its attempts ran out.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import pg from "pg";
import WebSocket from "ws";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, waitFor, type TestServer } from "../helpers/server.ts";
import { approve, deviceClient, deviceMetadata, seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";

let url: string;
let server: TestServer;
usePostgres({
  async setup(cluster) {
    url = await cluster.createDatabase("held");
    server = await startTestServer({ database: { url } });
  },
  teardown: async () => server?.close(),
});

/** A connection of the test's own that holds `lock` (a `SELECT ... FOR UPDATE`) in an open transaction until `release`. */
async function holdRows(lock: string, parameters: unknown[]): Promise<{ release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query("BEGIN");
  await client.query(lock, parameters);
  let released: Promise<void> | undefined;
  return {
    release: () =>
      (released ??= (async () => {
        await client.query("COMMIT");
        await client.end();
      })()),
  };
}

/** Resolves once some session of the server waits for a lock (the held transaction is under way). */
const untilWaiting = () =>
  waitFor(async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      return rows[0].n > 0;
    } finally {
      await client.end();
    }
  }, 10_000, "a session of the server waiting for the held lock");

test("a deployment's completion held before its commit: its finished device is held, not offered the policy the completion replaces", async () => {
  const v2 = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("v2") });
  const v3 = await uploadOk(server, { token: server.adminToken, version: "v3", devtype: "board", file: Buffer.from("v3") });
  const [device] = await seedDevices(server, 1);
  const group = (await server.call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/package`, { packages: [v2.id, v3.id] }],
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "exact_match,v2" }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: [device.id], remove: [] }],
  ] as const) {
    assert.equal((await server.call(method, path, json)).status, 200);
  }
  const check = async (version: string) => {
    const res = await server.request("/api/v1/update/check", { method: "POST", token: device.token, json: deviceMetadata(device.mac, { "svc.software.version": version, "svc.hardware.devtype": "board" }) });
    return { status: res.status, version: res.status === 200 ? ((await res.json()) as { version: string }).version : undefined };
  };
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v3" });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.deepEqual(await check("v2"), { status: 200, version: "v3" });

  // The completion (the device's install is its last) waits for the group's row, which it gives the new policy.
  const held = await holdRows("SELECT id FROM groups WHERE id = $1 FOR UPDATE", [group]);
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${device.token}` } });
  try {
    await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
    const acked = new Promise((resolve) => ws.on("message", (data) => JSON.parse(data.toString()).method === "update_outcome_ack" && resolve(undefined)));
    ws.send(JSON.stringify({ method: "update_outcome", id: "installed-v3", state: "installed", version: "v3", from_version: "v2" }));
    await untilWaiting();
    assert.deepEqual(await check("v3"), { status: 204, version: undefined }, "a check while the completion waits");
    await held.release();
    await acked;
  } finally {
    await held.release();
    ws.close();
  }
  const done = await server.call("GET", `/api/v2/deployments/${created.body.id}`);
  assert.equal(done.body.status, "completed");
  assert.equal((await server.call("GET", `/api/v2/groups/${group}`)).body.policy, "exact_match,v3");
  assert.deepEqual(await check("v3"), { status: 204, version: undefined });
});

test("devices that ask to register all at once, again and again, are all answered: pending, then accepted once approved", async () => {
  const clients = Array.from({ length: 24 }, () => deviceClient(server));
  // Waiting devices repeat their request: every round is every device at once.
  for (let round = 0; round < 3; round++) {
    const answers = await Promise.all(clients.map((client) => client.authorize()));
    assert.deepEqual([...new Set(answers.map((a) => a.status))], ["pending"]);
  }
  const pending = (await server.call<Array<{ mac_address: string }>>("GET", "/api/v1/auth/pending")).body.map((p) => p.mac_address);
  assert.deepEqual(pending.filter((mac) => clients.some((c) => c.mac === mac)).length, clients.length);
  // Approvals while the devices ask again.
  const approvals = await Promise.all([...clients.map((client) => approve(server, client).then((res) => res.status)), ...clients.map((client) => client.authorize().then(() => 200))]);
  assert.deepEqual([...new Set(approvals)], [200]);
  const answers = await Promise.all(clients.map((client) => client.authorize()));
  assert.deepEqual([...new Set(answers.map((a) => a.status))], ["accepted"]);
});
