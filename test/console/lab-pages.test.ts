/**
 * The lab on a device page in a real browser (issue 46): a board's power card, cycled from the
 * console by its `command` driver, and its console capture; reservations on the device page and
 * in the devices list.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { once } from "node:events";
import { createServer, type AddressInfo, type Socket } from "node:net";
import type { Browser } from "playwright-core";
import { tempDir, useTestServer } from "../helpers/server.ts";
import { labConfig } from "../lab/helpers.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { signedInAdmin, type Tab } from "./browser.ts";

const dir = tempDir("labgate-lab-console-");
const log = join(dir, "power.log");
writeFileSync(log, "");
const MAC = "02:00:00:46:01:01";

/** The board's console as ser2net serves it: its boot log for whoever connects. */
const sockets = new Set<Socket>();
const ser2net = createServer((socket) => {
  sockets.add(socket);
  socket.write("U-Boot 2024.01\r\nStarting kernel ...\r\n");
});
let browser: Browser;
let admin: Tab;
after(async () => {
  await browser?.close();
  for (const socket of sockets) socket.destroy();
  ser2net.close();
});
const server = useTestServer(
  async () => {
    ser2net.listen(0, "127.0.0.1");
    await once(ser2net, "listening");
    const power = { driver: "command", on: ["sh", "-c", `echo on >> ${log}`], off: ["sh", "-c", `echo off >> ${log}`], delay: 0 };
    return { lab: labConfig([{ device: MAC, power, serial: { tcp: `127.0.0.1:${(ser2net.address() as AddressInfo).port}` } }]) };
  },
  async (server) => {
    ({ browser, admin } = await signedInAdmin(server));
  },
);

test("a board's power is cycled from its device page; the card shows who did it; its console is shown", async () => {
  const [seeded, plain] = await seedDevices(server, 2);
  await server.db.run("UPDATE devices SET mac_address = ?, name = 'board-7' WHERE id = ?", [MAC, seeded!.id]);
  const { page } = admin;
  await page.goto(`${server.url}/#/devices/${seeded!.id}`);
  const card = page.locator("section.card", { has: page.getByRole("heading", { name: "Power" }) });
  await card.getByText("unknown").waitFor();
  await card.getByRole("button", { name: "Power cycle" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Power cycle" }).click();
  await card.getByText(/last cycle by admin/).waitFor();
  assert.equal(readFileSync(log, "utf8"), "off\non\n");
  await card.getByText("on", { exact: true }).waitFor();
  await page.getByLabel("Board console").getByText("Starting kernel").waitFor();
  await admin.shot("device-power");

  // A device that is no board has no power card.
  const answered = page.waitForResponse((r) => r.url().endsWith(`/api/v2/devices/${plain!.id}/power`));
  await page.goto(`${server.url}/#/devices/${plain!.id}`);
  assert.equal(((await (await answered).json()) as { driver: unknown }).driver, null);
  await page.getByRole("heading", { name: "Details" }).waitFor();
  assert.equal(await page.getByRole("heading", { name: "Power" }).count(), 0);
});

test("a board is reserved from its device page; the devices list shows who holds it until when", async () => {
  const [device] = await seedDevices(server, 1);
  await server.db.run("UPDATE devices SET name = 'board-9' WHERE id = ?", [device!.id]);
  const { page } = admin;
  await page.goto(`${server.url}/#/devices/${device!.id}`);
  const card = page.locator("section.card", { has: page.getByRole("heading", { name: "Reservation" }) });
  await card.getByText("Not reserved").waitFor();
  await card.getByRole("button", { name: "Reserve for 1 hour" }).click();
  await card.getByText(/Reserved by admin until/).waitFor();
  const held = (await server.call("GET", `/api/v2/devices/${device!.id}/reservation`)).body;
  assert.equal(held.holder, "admin");

  await page.goto(`${server.url}/#/devices?q=board-9`);
  const row = page.locator(`tr[data-mac="${device!.mac}"]`);
  await row.getByText("admin").waitFor();
  assert.match(await row.innerText(), /admin\s+until/);
  await admin.shot("devices-reserved");

  await page.goto(`${server.url}/#/devices/${device!.id}`);
  await card.getByRole("button", { name: "Release" }).click();
  await card.getByText("Not reserved").waitFor();
  assert.equal((await server.call("GET", `/api/v2/devices/${device!.id}/reservation`)).body.reserved, false);
});
