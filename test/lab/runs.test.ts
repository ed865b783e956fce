/*
 * Test runs on boards (issue 46) with a real `labgate agent` and Debian's pdudaemon: the `power`
 * module of a test config switches the run's board with the run's caller's `power` permission
 * (audited as the caller), a caller without it gets a failed case naming why, the module outside
 * a run on devices fails clearly; two runs on one board are queued, not overlapped, and a run that
 * waits too long for its board fails saying so.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { after, test } from "node:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { FAST_SERVER, spawnConnectedAgent } from "../update/helpers/agents.ts";
import { getRun, reportRows, uploadConfig, waitRun, type RunObject } from "../testrun/run-helpers.ts";
import { labConfig, startPdudaemon, type Pdudaemon } from "./helpers.ts";

const DAY = 86400;
const BOARD = "board-runs-46";
const children: ChildProcess[] = [];
let pdu: Pdudaemon;
after(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  pdu?.close();
});
const server = useTestServer(async () => {
  pdu = await startPdudaemon();
  return {
    ...FAST_SERVER,
    lab: labConfig([{ device: BOARD, power: { driver: "pdudaemon", url: pdu.url, hostname: "pdu1", port: 4, delay: 0 } }]),
    test_server: { device_wait: 5, board_wait: 4 },
  };
});

let board: { id: number } | undefined;
async function theBoard(): Promise<{ id: number }> {
  if (board) return board;
  const agent = await spawnConnectedAgent(server, [`name: ${BOARD}`, "tests: {enabled: true, max_duration: 120}"]);
  children.push(agent.child);
  return (board = agent);
}

const config = (name: string, entries: string[]) => uploadConfig(server, name, ["tests:", "  g:", `    machines: ["device:${BOARD}"]`, "    tests:", ...entries.map((e) => `    ${e}`), ""].join("\n"));
const start = async (name: string, token = server.adminToken): Promise<string> => {
  const res = await server.call("POST", "/api/v1/test-runs", { config_name: name }, token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.id as string;
};

test("the power module cycles the run's board through pdudaemon as the run's caller, then waits; without power the case fails naming why", async () => {
  const { id } = await theBoard();
  await config("power.yml", ["- power: {action: cycle, wait: 0.2}", "- exec: {command: [true]}"]);
  const before = pdu.asked().length;
  const run = await waitRun(server, await start("power.yml"), undefined, 30_000);
  assert.equal(run.status, "finished", JSON.stringify(run));
  assert.deepEqual(pdu.asked().slice(before), ["4 off", "4 on"], "pdudaemon's reboot of port 4");
  const audit = await server.db.get<{ actor: string }>("SELECT actor FROM audit_log WHERE action = 'power.cycle' AND target = ? ORDER BY id DESC", [`device:${id}`]);
  assert.equal(audit?.actor, "admin", "audited as the run's caller");
  assert.equal((await server.call("GET", `/api/v2/devices/${id}/power`)).body.state, "on");

  // A tester with `test` on the board but not `power`.
  for (const permission of ["test", "read"]) assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "tester-runs", resource: "device", resource_id: id, permission })).status, 200);
  const tester = server.token(["tests_rw"], "tester-runs", DAY);
  const asked = pdu.asked().length;
  const refused = await waitRun(server, await start("power.yml", tester), undefined, 30_000);
  assert.equal(refused.status, "failed");
  const rows = await reportRows(server, refused.id);
  const row = rows.find((r) => r["test name"]?.startsWith("power["))!;
  assert.ok(row, JSON.stringify(rows));
  assert.equal(row.status, "failed");
  assert.match(row.message!, /power cycle: insufficient permission/);
  assert.equal(pdu.asked().length, asked, "nothing reached the PDU");
});

test("the power module outside a run on devices is skipped saying why; a bad action is refused at trigger", async () => {
  await uploadConfig(server, "power-local.yml", "tests:\n  g:\n  - power: {action: 'on'}\n");
  const local = await waitRun(server, await start("power-local.yml"));
  const row = (await reportRows(server, local.id))[0]!;
  assert.equal(row.status, "skipped");
  assert.match(row.message!, /^Skipped: the power module switches a board: it runs only in a run on managed devices/);

  await uploadConfig(server, "power-bad.yml", "tests:\n  g:\n  - power: {action: explode}\n");
  const bad = await server.call("POST", "/api/v1/test-runs", { config_name: "power-bad.yml" });
  assert.equal(bad.status, 422);
  assert.match(bad.body.error as string, /parameter 'action': expected one of on, off, cycle/);
});

const progress = (run: RunObject) => (run.devices as Array<{ status: string; error: string | null }>)[0]!;

test("two runs on one board are queued, not overlapped; a run that waits past test_server.board_wait fails saying so", async () => {
  await theBoard();
  // Each run writes when it begins and ends (the agent runs beside the test, on this machine).
  const stamps = join(tempDir("labgate-stamps-"), "stamps");
  writeFileSync(stamps, "");
  await config("stamp.yml", [`- exec: {command: [sh, -c, 'echo begin >> ${stamps}; sleep 1; echo end >> ${stamps}']}`]);
  const [first, second] = [await start("stamp.yml"), await start("stamp.yml")];
  // The second waits for the board while the first runs.
  await waitFor(async () => progress(await getRun(server, first)).status === "running", 15_000, "the first run on the board");
  assert.equal(progress(await getRun(server, second)).status, "waiting");
  const [a, b] = [await waitRun(server, first, undefined, 30_000), await waitRun(server, second, undefined, 30_000)];
  assert.deepEqual([a.status, b.status], ["finished", "finished"], JSON.stringify([a, b]));
  assert.deepEqual(readFileSync(stamps, "utf8").split("\n").filter(Boolean), ["begin", "end", "begin", "end"], "one after the other, not overlapped");

  // A run that holds the board longer than board_wait (4 s): the next one gives up, saying why.
  await config("long.yml", ["- exec: {command: [sleep, '8']}"]);
  const long = await start("long.yml");
  await waitFor(async () => progress(await getRun(server, long)).status === "running", 15_000, "the long run on the board");
  const late = await waitRun(server, await start("stamp.yml"), undefined, 30_000);
  assert.equal(late.status, "failed");
  assert.match(progress(late).error!, /^the board was busy with run [0-9a-f-]{36} for longer than test_server\.board_wait \(4 s\)$/);
  assert.equal((await waitRun(server, long, undefined, 30_000)).status, "finished", "the run holding the board is not disturbed");
});
