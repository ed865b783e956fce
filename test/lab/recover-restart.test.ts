/*
 * A restart in the middle of a board's deployment attempt: the attempt's console span still
 * starts at its offer (what the board printed before the restart is in it), and a board `recover`
 * cycled before the restart is not cycled again for the same attempt after it.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { openDeviceSocket, type DeviceSocket } from "../helpers/device-socket.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { boardPrints, labConfig, serialPair, type SerialPair } from "./helpers.ts";

const DAY = 86400;
const MAC = "02:00:00:46:05:02";
const dir = tempDir("labgate-recover-restart-");
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
      [{ device: MAC, serial: { port: tty.port }, power: { driver: "command", on: ["sh", "-c", `printf 'board-8 login:\\r\\n' > ${tty.board}`], off: ["true"], delay: 0 } }],
      { console_after_outcome: 5 },
    ),
  };
});
// Tokens of the server running now (a restarted server's clock starts again at the real time).
const admin = () => server.token(["admin_rw"], "lab-admin", 30 * DAY);
const call = (method: string, path: string, json?: unknown) => server.call(method, path, json, admin());
const consoleText = async (id: number) => await server.request(`/api/v2/devices/${id}/console`, { token: admin() }).then((r) => r.text());
const cycles = async (id: number) => (await server.db.all("SELECT id FROM audit_log WHERE action = 'power.cycle' AND target = ?", [`device:${id}`])).length;

async function reporter(id: number) {
  socket?.ws.close();
  socket = await openDeviceSocket(server.url, server.server.ctx.tokens.issueDevice(MAC, id, 30 * DAY), "board");
  let n = 0;
  return async (outcome: Record<string, unknown>) => {
    const acked = socket!.next("update_outcome_ack");
    socket!.send({ method: "update_outcome", id: `r-${id}-${++n}-${server.clock.now()}`, ...outcome });
    await acked;
  };
}

/** Ticks the deployments past `recover`'s two minutes: the first tick counts a restarted server's installing board from then. */
async function pastRecoverTime(): Promise<void> {
  await server.server.domains.update.deployments.tick();
  server.clock.advance(121_000);
  await server.server.domains.update.deployments.tick();
  await server.server.domains.update.deployments.tick();
  await server.server.domains.update.deployments.recoveriesSettled();
}

test("after a restart, an attempt's console span still starts at its offer and a board recover cycled is not cycled again for that attempt", async () => {
  const pkg = (await uploadOk(server, { token: admin(), version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id;
  const [seeded] = await seedDevices(server, 1);
  const id = seeded!.id;
  await server.db.run("UPDATE devices SET mac_address = ? WHERE id = ?", [MAC, id]);
  const group = (await call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," }],
    ["POST", `/api/v2/groups/${group}/package`, { packages: [pkg] }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] }],
  ] as const) {
    assert.equal((await call(method, path, json)).status, 200);
  }
  const created = await call("POST", "/api/v2/deployments", { group, version: "v2", device_timeout_minutes: 60, recover: { power_cycle_after_minutes: 2 } });
  assert.equal(created.status, 201, JSON.stringify(created.body));

  boardPrints(tty, "before the offer\r\n");
  await waitFor(async () => (await consoleText(id)).includes("before the offer"), 10_000, "the console before the offer");
  const token = server.server.ctx.tokens.issueDevice(MAC, id, 30 * DAY);
  const res = await server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(MAC, { "svc.software.version": "v1" }) });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  await (await reporter(id))({ state: "installing", version: "v2", from_version: "v1" });
  boardPrints(tty, "Writing v2 to mmcblk0p2\r\n");
  await waitFor(async () => (await consoleText(id)).includes("Writing v2"), 10_000, "the install on the console");
  await pastRecoverTime();
  assert.equal(await cycles(id), 1, "cycled once before the restart");
  await waitFor(async () => (await consoleText(id)).includes("login:"), 10_000, "the boot after the cycle");

  socket!.ws.close();
  await server.restart();
  await waitFor(async () => (await server.request(`/api/v2/devices/${id}/console`, { token: admin() })).headers.get("x-console-status") === "connected", 10_000, "the console read again");
  await pastRecoverTime();
  assert.equal(await cycles(id), 1, "the attempt's board is not cycled again after the restart");
  const history = (await call("GET", `/api/v2/devices/${id}/update-history`)).body as Array<{ id: number; outcome: string }>;
  assert.equal(history.filter((h) => h.outcome === "power_cycle").length, 1, JSON.stringify(history));

  await (await reporter(id))({ state: "installed", version: "v2", from_version: "v1" });
  boardPrints(tty, "labgate agent: reported v2\r\n");
  await waitFor(async () => (await consoleText(id)).includes("reported v2"), 10_000, "the boot after the outcome");
  server.clock.advance(6_000);
  const installed = ((await call("GET", `/api/v2/devices/${id}/update-history`)).body as Array<{ id: number; outcome: string }>).find((h) => h.outcome === "installed")!;
  const span = await waitFor(async () => {
    const answer = await server.request(`/api/v2/devices/${id}/update-history/${installed.id}/console`, { token: admin() });
    return answer.status === 200 ? answer.text() : undefined;
  }, 10_000, "the attempt's span saved");
  assert.ok(span.startsWith("Writing v2") && span.includes("login:") && span.includes("reported v2"), span);
});
