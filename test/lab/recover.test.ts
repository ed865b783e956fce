/*
 * Deployments on boards (issue 46): each attempt keeps what the board's console printed from the
 * offer to the outcome and the boot after it, beside its history row; `recover` power-cycles a
 * board silent after its install once (audited as system:deployment), the cycle's span beside
 * its own history row, and the board then counts as it reports. A socat pseudo-terminal is the
 * board's console; its power port's `on` prints the boot log to it, as a board does.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { openDeviceSocket, type DeviceSocket } from "../helpers/device-socket.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { boardPrints, labConfig, serialPair, type SerialPair } from "./helpers.ts";

const DAY = 86400;
const MAC = "02:00:00:46:05:01";
const BOOT = "U-Boot 2024.01\r\nStarting kernel ...\r\nboard-7 login:\r\n";
const dir = tempDir("labgate-recover-");
let tty: SerialPair;
let socket: DeviceSocket | undefined;
after(async () => {
  socket?.ws.close();
  await tty?.close();
});
const server = useTestServer(async () => {
  tty = await serialPair(dir, "ttyUSB0");
  return {
    lab: labConfig(
      [
        {
          device: MAC,
          serial: { port: tty.port },
          power: { driver: "command", on: ["sh", "-c", `printf '${BOOT.replaceAll("\r\n", "\\r\\n")}' > ${tty.board}`], off: ["true"], delay: 0 },
        },
      ],
      { console_after_outcome: 5 },
    ),
  };
});
let adminToken: string | undefined;
const admin = () => (adminToken ??= server.token(["admin_rw"], "lab-admin", 30 * DAY));
const call = (method: string, path: string, json?: unknown, token = admin()) => server.call(method, path, json, token);
const consoleText = async (id: number) => (await server.request(`/api/v2/devices/${id}/console`, { token: admin() }).then((r) => r.text()));

test("a deployment whose board does not come back after its install power-cycles it once, captures its boot, and then counts its report; each attempt's console span is beside its history row", async () => {
  const pkg = (await uploadOk(server, { token: admin(), version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id;
  const [seeded] = await seedDevices(server, 1);
  await server.db.run("UPDATE devices SET mac_address = ? WHERE id = ?", [MAC, seeded!.id]);
  const id = seeded!.id;
  const token = server.server.ctx.tokens.issueDevice(MAC, id, 30 * DAY);
  const group = (await call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," }],
    ["POST", `/api/v2/groups/${group}/package`, { packages: [pkg] }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] }],
  ] as const) {
    assert.equal((await call(method, path, json)).status, 200);
  }
  const bad = await call("POST", "/api/v2/deployments", { group, version: "v2", recover: { power_cycle_after_minutes: 0 } });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error as string, /recover\.power_cycle_after_minutes/);

  const created = await call("POST", "/api/v2/deployments", { group, version: "v2", device_timeout_minutes: 30, recover: { power_cycle_after_minutes: 2 } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.deepEqual(created.body.recover, { power_cycle_after_minutes: 2 });

  boardPrints(tty, "before the offer\r\n");
  await waitFor(async () => (await consoleText(id)).includes("before the offer"), 10_000, "the console before the offer");
  const res = await server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(MAC, { "svc.software.version": "v1" }) });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  socket = await openDeviceSocket(server.url, token, "board");
  let n = 0;
  const report = async (outcome: Record<string, unknown>) => {
    const acked = socket!.next("update_outcome_ack");
    socket!.send({ method: "update_outcome", id: `r-${++n}`, ...outcome });
    await acked;
  };
  await report({ state: "installing", version: "v2", from_version: "v1" });
  boardPrints(tty, "Writing v2 to mmcblk0p2\r\nRebooting\r\n");
  await waitFor(async () => (await consoleText(id)).includes("Rebooting"), 10_000, "the install on the console");

  // Silent for less than 2 minutes: nothing; past them: one power cycle.
  server.clock.advance(60_000);
  await server.server.domains.update.deployments.tick();
  const cycles = () => server.db.all<{ actor_kind: string; actor: string }>("SELECT actor_kind, actor FROM audit_log WHERE action = 'power.cycle' AND target = ?", [`device:${id}`]);
  assert.equal((await cycles()).length, 0);
  server.clock.advance(61_000);
  await server.server.domains.update.deployments.tick();
  await server.server.domains.update.deployments.tick();
  await server.server.domains.update.deployments.recoveriesSettled();
  assert.deepEqual(await cycles(), [{ actor_kind: "system", actor: "deployment" }], "cycled once, audited as system:deployment");
  await waitFor(async () => (await consoleText(id)).includes("login:"), 10_000, "the boot after the cycle on the console");

  const history = async () => (await call("GET", `/api/v2/devices/${id}/update-history`)).body as Array<{ id: number; outcome: string; reason: string | null; attempt: number | null }>;
  const cycled = (await history()).find((h) => h.outcome === "power_cycle")!;
  assert.ok(cycled, JSON.stringify(await history()));
  assert.equal(cycled.reason, "no report within 2 minutes of its install: power-cycled");
  const members = (await call("GET", `/api/v2/deployments/${created.body.id}/devices`)).body as Array<{ state: string }>;
  assert.equal(members[0]!.state, "installing", "it still counts as it reports or times out");

  // It comes back and reports; the boot after the outcome goes into the attempt's span too.
  await report({ state: "installed", version: "v2", from_version: "v1" });
  boardPrints(tty, "labgate agent: reported v2\r\n");
  await waitFor(async () => (await consoleText(id)).includes("reported v2"), 10_000, "the boot after the outcome");
  server.clock.advance(6_000);
  const spans = async () => (await call("GET", `/api/v2/devices/${id}/console-spans`)).body as Array<{ history_id: number }>;
  await waitFor(async () => (await spans()).length === 2, 10_000, "both spans saved");
  const installed = (await history()).find((h) => h.outcome === "installed")!;
  assert.deepEqual((await spans()).map((s) => s.history_id), [installed.id, cycled.id]);

  const span = async (entry: number, token = admin()) => server.request(`/api/v2/devices/${id}/update-history/${entry}/console`, { token });
  const ofCycle = await (await span(cycled.id)).text();
  assert.ok(ofCycle.includes("Rebooting") && ofCycle.includes("login:"), ofCycle);
  assert.ok(!ofCycle.includes("before the offer"), "from the offer on");
  const ofAttempt = await (await span(installed.id)).text();
  assert.ok(ofAttempt.startsWith("Writing v2") && ofAttempt.includes("login:") && ofAttempt.includes("reported v2"), ofAttempt);

  // The history's read rules: a caller who may not read the device gets a 404, as for the history.
  const stranger = server.token(["tests_ro"], "stranger-46", DAY);
  assert.equal((await span(installed.id, stranger)).status, 404);
  assert.equal((await call("GET", `/api/v2/devices/${id}/console-spans`, undefined, stranger)).status, 404);
  assert.equal((await span(999_999)).status, 404, "an entry without a span");
  assert.equal((await cycles()).length, 1, "once per attempt");
});
