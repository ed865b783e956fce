/*
 * Board reservations (issue 46): POST/GET/DELETE /api/v2/devices/{id}/reservation, refreshed by
 * its holder, ended by DELETE, by expiry (the server's clock) or by an administrator (audited);
 * a test run of anyone but the holder naming a reserved board is refused 409 naming it.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { FAST_SERVER } from "../update/helpers/agents.ts";
import { protocolDevice, type ProtocolDevice } from "../testrun/device-helpers.ts";
import { uploadConfig, waitRun } from "../testrun/run-helpers.ts";

const devices: ProtocolDevice[] = [];
after(() => devices.forEach((d) => d.close()));
const server = useTestServer({ ...FAST_SERVER, test_server: { device_wait: 5 } }, (s) => uploadConfig(s, "lab.yml", "tests:\n  g:\n  - exec:\n      command: [true]\n"));

const grant = async (user_id: string, resource_id: number, permission: string) =>
  assert.equal((await server.call("POST", "/api/v1/permissions", { user_id, resource: "device", resource_id, permission })).status, 200);
const reservation = (id: number, token?: string) => server.call("GET", `/api/v2/devices/${id}/reservation`, undefined, token);
const reserve = (id: number, body: unknown, token?: string) => server.call("POST", `/api/v2/devices/${id}/reservation`, body, token);
const release = (id: number, token?: string) => server.call("DELETE", `/api/v2/devices/${id}/reservation`, undefined, token);
const audited = (id: number) =>
  server.db.all<{ action: string; actor: string; detail: string | null }>("SELECT action, actor, detail FROM audit_log WHERE target = ? AND action LIKE 'reservation.%' ORDER BY id", [`device:${id}`]);

let board: ProtocolDevice;
let alice: string;
let bob: string;
async function setup(): Promise<void> {
  if (board) return;
  board = await protocolDevice(server, "board-7");
  devices.push(board);
  alice = server.token(["tests_rw"], "alice46");
  bob = server.token(["tests_rw"], "bob46");
  for (const user of ["alice46", "bob46"]) {
    await grant(user, board.id, "read");
    await grant(user, board.id, "test");
  }
}

describe("reservations", () => {
  test("a reservation is its holder's until it expires; the holder refreshes it, another is refused 409", async () => {
    await setup();
    assert.deepEqual((await reservation(board.id, alice)).body, { device_id: board.id, reserved: false, holder: null, note: null, since: null, until: null });
    // Short spans: the tests' tokens live an hour of the server's clock.
    const taken = await reserve(board.id, { minutes: 10, note: "bisecting the boot hang" }, alice);
    assert.equal(taken.status, 200, JSON.stringify(taken.body));
    assert.equal(taken.body.holder, "alice46");
    const until = Date.parse(taken.body.until);
    assert.ok(Math.abs(until - (server.clock.now() + 600_000)) < 5000);
    assert.deepEqual((await reservation(board.id, bob)).body, taken.body, "everyone who reads the board sees who holds it");
    assert.deepEqual((await server.call("GET", "/api/v2/reservations", undefined, bob)).body, [taken.body]);
    assert.deepEqual((await server.call("GET", "/api/v2/reservations", undefined, server.token([], "nobody46"))).body, [], "a board one may not read is not listed");

    const refused = await reserve(board.id, { minutes: 5 }, bob);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.error, `device 'board-7' is reserved by alice46 until ${taken.body.until}`);

    server.clock.advance(5 * 60_000);
    const refreshed = await reserve(board.id, { minutes: 10, note: "still bisecting" }, alice);
    assert.equal(refreshed.status, 200);
    assert.equal(refreshed.body.since, taken.body.since, "a refresh keeps when it began");
    assert.ok(Date.parse(refreshed.body.until) - until >= 5 * 60_000 - 1000);
    assert.equal((await reserve(board.id, { minutes: 1 }, bob)).status, 409, "refreshed, it still holds");

    server.clock.advance(10 * 60_000 + 1000);
    assert.equal((await reservation(board.id)).body.reserved, false, "past its time it holds nothing");
    const next = await reserve(board.id, { minutes: 10 }, bob);
    assert.equal(next.status, 200);
    assert.equal(next.body.holder, "bob46");
    assert.equal((await release(board.id, bob)).body.reserved, false);
    assert.deepEqual(
      (await audited(board.id)).map((a) => [a.action, a.actor]),
      [
        ["reservation.create", "alice46"],
        ["reservation.refresh", "alice46"],
        ["reservation.create", "bob46"],
        ["reservation.release", "bob46"],
      ],
    );
  });

  test("only the holder releases; an administrator breaks it, audited with whose it was", async () => {
    await setup();
    assert.equal((await reserve(board.id, { minutes: 60 }, alice)).status, 200);
    const refused = await release(board.id, bob);
    assert.equal(refused.status, 403);
    assert.equal(refused.body.error, "the reservation is alice46's: only its holder or an administrator may end it");
    assert.equal((await reservation(board.id)).body.holder, "alice46");
    const broken = await release(board.id);
    assert.equal(broken.status, 200);
    assert.equal(broken.body.reserved, false);
    const last = (await audited(board.id)).at(-1)!;
    assert.deepEqual([last.action, last.actor, JSON.parse(last.detail!).holder], ["reservation.break", "admin", "alice46"]);
    assert.equal((await release(board.id, bob)).status, 200, "releasing a free board changes nothing");
  });

  test("reserving needs test or power on the device; bad bodies are 400 and change nothing", async () => {
    await setup();
    const carol = server.token(["tests_rw"], "carol46");
    assert.equal((await reserve(board.id, { minutes: 5 }, carol)).status, 404, "a device carol may not read is hidden");
    await grant("carol46", board.id, "read");
    assert.equal((await reserve(board.id, { minutes: 5 }, carol)).status, 403);
    await grant("carol46", board.id, "power");
    assert.equal((await reserve(board.id, { minutes: 5 }, carol)).status, 200);
    assert.equal((await release(board.id, carol)).status, 200);
    for (const body of [{ minutes: 0 }, { minutes: 10081 }, { minutes: 1.5 }, { minutes: "60" }, {}, { minutes: 5, note: "x".repeat(257) }, { minutes: 5, holder: "alice46" }]) {
      const res = await reserve(board.id, body, alice);
      assert.equal(res.status, 400, JSON.stringify(body));
    }
    assert.equal((await reservation(board.id)).body.reserved, false);
    assert.equal((await reserve(999_999, { minutes: 5 })).status, 404);
  });

  test("a test run naming a board someone else holds is refused 409 naming it; the holder's runs", async () => {
    await setup();
    assert.equal((await reserve(board.id, { minutes: 60 }, alice)).status, 200);
    const refused = await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml", machine_target: "device:board-7" }, bob);
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.match(refused.body.error, /^device 'board-7' is reserved by alice46 until \S+$/);
    const byAdmin = await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml", machine_target: `device:${board.mac}` });
    assert.equal(byAdmin.status, 409, "an administrator's run waits for the holder too");

    const mine = await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml", machine_target: "device:board-7" }, alice);
    assert.equal(mine.status, 200, JSON.stringify(mine.body));
    const start = await board.next("test_run_start");
    board.send({ method: "test_run_end", run_id: start.run_id, status: "finished", error: null, warnings: [] });
    assert.equal((await waitRun(server, mine.body.id)).status, "finished");

    assert.equal((await release(board.id, alice)).status, 200);
    const after = await server.call("POST", "/api/v1/test-runs", { config_name: "lab.yml", machine_target: "device:board-7" }, bob);
    assert.equal(after.status, 200, "released, the board runs anyone's tests");
    const again = await board.next("test_run_start");
    board.send({ method: "test_run_end", run_id: again.run_id, status: "finished", error: null, warnings: [] });
    await waitRun(server, after.body.id);
  });
});
