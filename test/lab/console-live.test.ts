/*
 * The live console (issue 46): GET /api/v2/devices/{id}/console/ws follows what the board prints
 * (a socat pseudo-terminal as its tty); a caller with `shell` on the device writes to the port,
 * bounded per frame and audited; a reader is read-only; bad targets are refused before the
 * upgrade, and a port that went away refuses input saying why.
 */
import assert from "node:assert/strict";
import { constants, openSync } from "node:fs";
import { ReadStream } from "node:tty";
import { after, test } from "node:test";
import WebSocket from "ws";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { CLOSE_CONSOLE_INPUT, CLOSE_READ_ONLY, MAX_CONSOLE_INPUT } from "../../src/lab/routes.ts";
import { CLOSE_UNAUTHORIZED } from "../../src/update/channel/hub.ts";
import { boardPrints, labConfig, serialPair, type SerialPair } from "./helpers.ts";

const DAY = 86400;
const MACS = { board: "02:00:00:46:06:01", plain: "02:00:00:46:06:02" };
const dir = tempDir("labgate-console-live-");
let tty: SerialPair;
/** What reached the board's end of the pair (what was written to its console port). */
let typed = "";
let boardEnd: ReadStream | undefined;
after(async () => {
  boardEnd?.destroy();
  await tty?.close();
});
const server = useTestServer(async () => {
  tty = await serialPair(dir, "ttyUSB0");
  boardEnd = new ReadStream(openSync(tty.board, constants.O_RDONLY | constants.O_NOCTTY | constants.O_NONBLOCK));
  boardEnd.on("data", (chunk: Buffer) => (typed += chunk.toString()));
  boardEnd.on("error", () => {});
  return { lab: labConfig([{ device: MACS.board, serial: { port: tty.port } }]) };
});

interface Live {
  ws: WebSocket;
  received(): string;
  closed: Promise<{ code: number; reason: string }>;
}
async function live(id: number, token: string): Promise<Live> {
  const ws = new WebSocket(`${server.url.replace(/^http/, "ws")}/api/v2/devices/${id}/console/ws?token=${token}`);
  let text = "";
  ws.on("message", (data: Buffer) => (text += data.toString()));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
  return { ws, received: () => text, closed };
}

let ids: { board: number; plain: number } | undefined;
async function devices(): Promise<{ board: number; plain: number }> {
  if (ids) return ids;
  const seeded = await seedDevices(server, 2);
  await server.db.write(async (tx) => {
    await tx.run("UPDATE devices SET mac_address = ? WHERE id = ?", [MACS.board, seeded[0]!.id]);
    await tx.run("UPDATE devices SET mac_address = ? WHERE id = ?", [MACS.plain, seeded[1]!.id]);
  });
  const board = seeded[0]!.id;
  for (const [user, permission] of [["reader-46", "read"], ["sheller-46", "read"], ["sheller-46", "shell"]]) {
    assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: user, resource: "device", resource_id: board, permission })).status, 200);
  }
  return (ids = { board, plain: seeded[1]!.id });
}

test("the live console follows the board; with shell on the device what is sent reaches the port (audited); a reader's input closes it read-only", async () => {
  const { board } = await devices();
  await waitFor(async () => (await server.call("GET", `/api/v2/devices/${board}/power`)).status === 200, 5000, "the board");
  const sheller = await live(board, server.token(["tests_ro"], "sheller-46", DAY));
  const reader = await live(board, server.token(["tests_ro"], "reader-46", DAY));
  boardPrints(tty, "board-7 login: ");
  await waitFor(() => sheller.received().includes("login:") && reader.received().includes("login:"), 10_000, "both views see the board");

  sheller.ws.send("root\r");
  await waitFor(() => typed.includes("root\r"), 10_000, "the input on the board's end");

  reader.ws.send("reboot\r");
  assert.deepEqual(await reader.closed, { code: CLOSE_READ_ONLY, reason: "read-only: writing to this console needs the shell permission on the device" });
  sheller.ws.send(Buffer.alloc(MAX_CONSOLE_INPUT + 1, 0x61));
  assert.deepEqual(await sheller.closed, { code: CLOSE_CONSOLE_INPUT, reason: `input frames are limited to ${MAX_CONSOLE_INPUT} bytes` });
  assert.ok(!typed.includes("reboot") && !typed.includes("aaaa"), "neither refused input reached the board");
  await waitFor(
    async () => (await server.db.get("SELECT 1 AS x FROM audit_log WHERE action = 'console.write' AND actor = 'sheller-46' AND target = ?", [`device:${board}`])) !== undefined,
    5000,
    "console.write audited",
  );
});

test("a live session ends once its caller may no longer have it: a writer's when shell on the device is revoked, a reader's when read is", async () => {
  const { board } = await devices();
  const grant = async (user: string, permission: string) => {
    const res = await server.call("POST", "/api/v1/permissions", { user_id: user, resource: "device", resource_id: board, permission });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body.id as number;
  };
  await grant("revoked-46", "read");
  const shell = await grant("revoked-46", "shell");
  const watcher = await grant("watcher-46", "read");
  const writer = await live(board, server.token(["tests_ro"], "revoked-46", DAY));
  const reader = await live(board, server.token(["tests_ro"], "watcher-46", DAY));
  boardPrints(tty, "still here\r\n");
  await waitFor(() => writer.received().includes("still here") && reader.received().includes("still here"), 10_000, "both views see the board");

  assert.equal((await server.call("DELETE", `/api/v1/permissions/${shell}`)).status, 200);
  assert.deepEqual(await writer.closed, { code: CLOSE_UNAUTHORIZED, reason: "writing to this console needs the shell permission on the device" });
  assert.equal(reader.ws.readyState, WebSocket.OPEN, "a reader needs no shell");
  assert.equal((await server.call("DELETE", `/api/v1/permissions/${watcher}`)).status, 200);
  assert.deepEqual(await reader.closed, { code: CLOSE_UNAUTHORIZED, reason: "the device is no longer readable" });
});

test("bad targets are refused before the upgrade; a port that went away refuses input saying why", async () => {
  const { board, plain } = await devices();
  const status = async (path: string, token?: string, upgrade = true) =>
    (await fetch(`${server.url}${path}${token ? `?token=${token}` : ""}`, { headers: upgrade ? { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==" } : {} }).catch(() => undefined))?.status;
  assert.equal(await status(`/api/v2/devices/${board}/console/ws`, undefined, false), 401);
  assert.equal(await status(`/api/v2/devices/${board}/console/ws`, server.adminToken, false), 426);
  assert.equal(await status(`/api/v2/devices/${plain}/console/ws`, server.adminToken, false), 409, "no console port");
  assert.equal(await status(`/api/v2/devices/999999/console/ws`, server.adminToken, false), 404);
  assert.equal(await status(`/api/v2/devices/${board}/console/ws`, server.token(["tests_ro"], "nobody-46", DAY), false), 404, "no read: as if it did not exist");

  const admin = await live(board, server.adminToken);
  await tty.close();
  await waitFor(async () => (await server.request(`/api/v2/devices/${board}/console`, { token: server.adminToken })).headers.get("x-console-status") !== "connected", 10_000, "the port gone");
  admin.ws.send("ls\r");
  const closed = await admin.closed;
  assert.equal(closed.code, CLOSE_CONSOLE_INPUT);
  assert.match(closed.reason, /^the console port is not connected: /);
  // The server goes on: the HTTP console still answers.
  assert.equal((await server.request(`/api/v2/devices/${board}/console`, { token: server.adminToken })).status, 200);
});
