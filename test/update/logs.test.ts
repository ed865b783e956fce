import assert from "node:assert/strict";
import { test } from "node:test";
import { removeDir, startTestServer, type TestServer } from "../helpers/server.ts";
import { json, registerDevice } from "./helpers/devices.ts";
import { parseRfc822 } from "../../src/util/time.ts";

type Log = { id: number; created: string; device_id: number; device_timestamp: string; name: string; entry: string };
type Device = Awaited<ReturnType<typeof registerDevice>>;

const BATCH = {
  batch: [
    { device_timestamp: "Wed, 02 Oct 2002 15:00:00 -0000", name: "CPU", entry: "0.123" },
    { device_timestamp: "Wed, 02 Oct 2002 15:00:00 -0000", name: "MEM", entry: "0.345" },
  ],
};

const post = (device: Device, body: unknown) => device.client.request("/api/v1/logs", { method: "POST", json: body });

async function withServer(fn: (server: TestServer) => Promise<void>, patch: Parameters<typeof startTestServer>[0] = {}) {
  const server = await startTestServer(patch);
  try {
    await fn(server);
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
}

// The reference server's own log tests (server/tests/test-server-logs.py), one by one.
test("device logs: the reference's log tests", () =>
  withServer(async (server) => {
    const admin = server.adminToken;
    const device = await registerDevice(server);
    const other = await registerDevice(server);
    const logsOf = (id: number, query = "") => server.request(`/api/v1/logs/device/${id}${query}`, { token: admin });
    const all = async () => [...(await json<Log[]>(logsOf(device.id))), ...(await json<Log[]>(logsOf(other.id)))];

    // test_no_logs; the body is `[]` and a newline, like every JSON body.
    const empty = await logsOf(device.id);
    assert.equal(empty.status, 200);
    assert.equal(await empty.text(), "[]\n");

    // test_insert_malformed_log_date: 400 and nothing stored.
    const bad = await post(device, { batch: [{ device_timestamp: "2003-03-30 22:00:00.000000", name: "FS", entry: "11.1" }] });
    assert.equal(bad.status, 400);
    assert.match((await json(bad)).error, /RFC 822/);
    assert.deepEqual(await all(), []);

    // test_inserted_logs
    const ok = await post(device, BATCH);
    assert.equal(ok.status, 200);
    assert.equal(await ok.text(), "{}\n");
    const logs = await all();
    assert.equal(logs.length, 2);
    assert.deepEqual(Object.keys(logs[0]).sort(), ["created", "device_id", "device_timestamp", "entry", "id", "name"]);
    assert.equal(logs[0].device_id, device.id);
    assert.equal(logs[0].device_timestamp, "Wed, 02 Oct 2002 15:00:00 GMT");

    // test_find_log_by_name
    const byName = await json<Log[]>(logsOf(device.id, "?name=CPU"));
    assert.deepEqual(byName.map((l) => l.entry), ["0.123"]);

    // test_fetch_since_date / test_fetch_to_date / test_fetch_malfomed_date
    const since = encodeURIComponent("Thu, 25 Jul 2024 10:51:39 -0000");
    assert.deepEqual(await json(logsOf(device.id, `?name=CPU&since=${since}`)), []);
    assert.equal((await json<Log[]>(logsOf(device.id, `?name=CPU&to=${since}`))).length, 1);
    assert.equal((await logsOf(device.id, `?name=CPU&since=${encodeURIComponent("2002-10-02T08:00:00-05:00")}`)).status, 400);

    // test_fetch_no_device / test_fetch_no_group
    assert.equal((await logsOf(123_456)).status, 404);
    assert.equal((await server.request("/api/v1/logs/group/999", { token: admin })).status, 404);

    // test_fetch_group / test_fetch_empty_group / test_fetch_after_removal_from_group
    const group = await json<{ id: number }>(server.request("/api/v2/groups", { method: "POST", token: admin, json: { metadata: { description: "test" } } }));
    const empty2 = await json<{ id: number }>(server.request("/api/v2/groups", { method: "POST", token: admin, json: { metadata: {} } }));
    const members = (add: number[], remove: number[]) =>
      server.request(`/api/v2/groups/${group.id}/devices`, { method: "PATCH", token: admin, json: { add, remove } });
    assert.equal((await members([device.id, other.id], [])).status, 200);
    assert.equal((await json<Log[]>(server.request(`/api/v1/logs/group/${group.id}`, { token: admin }))).length, 2);
    assert.deepEqual(await json(server.request(`/api/v1/logs/group/${empty2.id}`, { token: admin })), []);
    assert.equal((await members([], [device.id])).status, 200);
    assert.deepEqual(await json(server.request(`/api/v1/logs/group/${group.id}`, { token: admin })), []);

    // Single entries: GET and DELETE by id.
    const one = logs[0];
    assert.deepEqual(await json(server.request(`/api/v1/logs/${one.id}`, { token: admin })), one);
    assert.equal((await server.request(`/api/v1/logs/${one.id}`, { method: "DELETE", token: admin })).status, 200);
    const gone = await server.request(`/api/v1/logs/${one.id}`, { token: admin });
    assert.equal(gone.status, 404);
    assert.deepEqual(await gone.json(), { error: "log does not exist" });

    // test_delete_logs_group: back in the group, deleted through it.
    assert.equal((await members([device.id], [])).status, 200);
    assert.equal((await server.request(`/api/v1/logs/group/${group.id}`, { method: "DELETE", token: admin })).status, 200);
    assert.deepEqual(await all(), []);

    // test_delete_logs (by device, with filters).
    assert.equal((await post(device, BATCH)).status, 200);
    assert.equal((await server.request(`/api/v1/logs/device/${device.id}?name=MEM`, { method: "DELETE", token: admin })).status, 200);
    assert.deepEqual((await all()).map((l) => l.name), ["CPU"]);
    assert.equal((await server.request(`/api/v1/logs/device/${device.id}`, { method: "DELETE", token: admin })).status, 200);
    assert.deepEqual(await all(), []);
  }));

test("device logs: newest first, bounded per device and per batch, durable, gone with the device", () =>
  withServer(
    async (server) => {
      const admin = server.adminToken;
      const device = await registerDevice(server);
      const at = (minute: number) => `Mon, 23 Nov 2026 10:${String(minute).padStart(2, "0")}:00 +0000`;
      const entries = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ device_timestamp: at(from + i), name: "m", entry: String(from + i) }));

      // Entries arrive out of order; the answer is ordered by device time, newest first.
      assert.equal((await post(device, { batch: [entries(5, 1)[0], entries(1, 1)[0], entries(3, 1)[0]] })).status, 200);
      const ordered = await json<Log[]>(server.request(`/api/v1/logs/device/${device.id}`, { token: admin }));
      assert.deepEqual(ordered.map((l) => l.entry), ["5", "3", "1"]);

      // The cap (5) drops the oldest arrivals when a batch goes over.
      assert.equal((await post(device, { batch: entries(10, 4) })).status, 200);
      const kept = await json<Log[]>(server.request(`/api/v1/logs/device/${device.id}`, { token: admin }));
      assert.deepEqual(kept.map((l) => l.entry), ["13", "12", "11", "10", "3"]);

      // A batch over the maximum is refused whole.
      const big = await post(device, { batch: entries(20, 5) });
      assert.equal(big.status, 400);
      assert.match((await json(big)).error, /at most 4/);
      for (const body of [{}, { batch: {} }, { batch: [{ device_timestamp: at(1), name: "x" }] }, { batch: [{ device_timestamp: at(1), name: "", entry: "" }] }, { batch: [], extra: 1 }]) {
        assert.equal((await post(device, body)).status, 400, JSON.stringify(body));
      }
      assert.equal((await json<Log[]>(server.request(`/api/v1/logs/device/${device.id}`, { token: admin }))).length, 5);

      // A management token cannot post logs; a device token cannot read them.
      assert.equal((await server.request("/api/v1/logs", { method: "POST", token: admin, json: BATCH })).status, 401);
      assert.equal((await device.client.request(`/api/v1/logs/device/${device.id}`)).status, 401);

      // Durable: a restart on the same data dir keeps them.
      await server.close();
      const again = await startTestServer({ update_server: { device_logs_per_device: 5, device_logs_max_batch: 4 } }, server.dataDir);
      try {
        assert.equal((await json<Log[]>(again.request(`/api/v1/logs/device/${device.id}`, { token: again.adminToken }))).length, 5);
        // Deleting the device deletes its logs (17.18: the reference refused such a delete).
        assert.equal((await again.request(`/api/v2/devices/${device.id}`, { method: "DELETE", token: again.adminToken })).status, 200);
        assert.equal((await again.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM device_logs"))?.n, 0);
      } finally {
        await again.close();
      }
    },
    { update_server: { device_logs_per_device: 5, device_logs_max_batch: 4 } },
  ));

test("device logs: scopes and per-user permissions like other device data", () =>
  withServer(async (server) => {
    const admin = server.adminToken;
    const [mine, theirs] = [await registerDevice(server), await registerDevice(server)];
    for (const d of [mine, theirs]) assert.equal((await post(d, BATCH)).status, 200);
    const alice = server.token([], "alice");
    const grant = (permission: string) =>
      server.request("/api/v1/permissions", { method: "POST", token: admin, json: { user_id: "alice", resource: "device", resource_id: mine.id, permission } });
    const logsOf = (id: number, token: string, method = "GET") => server.request(`/api/v1/logs/device/${id}`, { method, token });

    // No permission: the device is hidden (404); read-only admin reads but cannot delete.
    assert.equal((await logsOf(mine.id, alice)).status, 404);
    const ro = server.token(["admin_ro"], "auditor");
    assert.equal((await json<Log[]>(logsOf(theirs.id, ro))).length, 2);
    assert.equal((await logsOf(theirs.id, ro, "DELETE")).status, 403);

    assert.equal((await grant("read")).status, 200);
    const visible = await json<Log[]>(logsOf(mine.id, alice));
    assert.equal(visible.length, 2);
    assert.equal((await server.request(`/api/v1/logs/${visible[0].id}`, { token: alice })).status, 200);
    assert.equal((await logsOf(theirs.id, alice)).status, 404);
    const hidden = (await json<Log[]>(logsOf(theirs.id, admin)))[0];
    assert.equal((await server.request(`/api/v1/logs/${hidden.id}`, { token: alice })).status, 404);
    assert.equal((await logsOf(mine.id, alice, "DELETE")).status, 403);
    assert.equal((await server.request(`/api/v1/logs/${visible[0].id}`, { method: "DELETE", token: alice })).status, 403);

    // A group shows only the member devices the caller may read; a group delete touches only those it may update.
    const group = await json<{ id: number }>(server.request("/api/v2/groups", { method: "POST", token: admin, json: { metadata: {} } }));
    await server.request(`/api/v2/groups/${group.id}/devices`, { method: "PATCH", token: admin, json: { add: [mine.id, theirs.id], remove: [] } });
    assert.equal((await server.request(`/api/v1/logs/group/${group.id}`, { token: alice })).status, 404, "the group itself is hidden");
    await server.request("/api/v1/permissions", { method: "POST", token: admin, json: { user_id: "alice", resource: "group", resource_id: group.id, permission: "read" } });
    // Group read propagates to its devices (2.7): alice now sees both devices' logs.
    assert.equal((await json<Log[]>(server.request(`/api/v1/logs/group/${group.id}`, { token: alice }))).length, 4);
    // Reading is not updating: a group delete by a caller who may update none of its devices is refused, and deletes nothing.
    assert.equal((await server.request(`/api/v1/logs/group/${group.id}`, { method: "DELETE", token: alice })).status, 403);
    assert.equal((await server.request(`/api/v1/logs/group/${group.id}`, { method: "DELETE", token: ro })).status, 403);
    assert.equal((await json<Log[]>(server.request(`/api/v1/logs/group/${group.id}`, { token: admin }))).length, 4);
    assert.equal((await grant("update")).status, 200);
    assert.equal((await server.request(`/api/v1/logs/group/${group.id}`, { method: "DELETE", token: alice })).status, 200);
    assert.equal((await json<Log[]>(logsOf(mine.id, admin))).length, 0);
    assert.equal((await json<Log[]>(logsOf(theirs.id, admin))).length, 2, "no update on that device: its logs stay");
  }));

test("parseRfc822 takes what Python's parsedate_to_datetime takes, and nothing else", () => {
  assert.equal(parseRfc822("Wed, 02 Oct 2002 15:00:00 -0000")?.toISOString(), "2002-10-02T15:00:00.000Z");
  assert.equal(parseRfc822("Wed, 02 Oct 2002 08:00:00 -0700")?.toISOString(), "2002-10-02T15:00:00.000Z");
  assert.equal(parseRfc822("2 Oct 2002 15:00 GMT")?.toISOString(), "2002-10-02T15:00:00.000Z");
  assert.equal(parseRfc822("Wed, 02 Oct 2002 10:00:00 EST")?.toISOString(), "2002-10-02T15:00:00.000Z");
  for (const bad of ["2003-03-30 22:00:00.000000", "2002-10-02T08:00:00-05:00", "Wed, 31 Feb 2002 15:00:00 GMT", "Wed, 02 Foo 2002 15:00:00 GMT", "", "Wed, 02 Oct 2002 25:00:00 GMT"]) {
    assert.equal(parseRfc822(bad), undefined, bad);
  }
});
