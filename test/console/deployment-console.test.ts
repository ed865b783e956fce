/**
 * A board's console span on its deployment's page in a real browser (issue 46): the attempt's
 * span is shown in the device's row, folded beside its reason like an install's output, and
 * unfolds to what the board printed from the offer to the outcome and the boot after it.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { labConfig } from "../lab/helpers.ts";
import { deviceMetadata, seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { signedInAdmin, type Tab } from "./browser.ts";

const DAY = 86400;
const MAC = "02:00:00:46:07:01";
/** The board's console as ser2net serves it; `prints` is what the board writes to it. */
const sockets = new Set<Socket>();
const ser2net = createServer((socket) => void sockets.add(socket));
const prints = (text: string) => {
  for (const socket of sockets) socket.write(text);
};
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
    return { lab: labConfig([{ device: MAC, serial: { tcp: `127.0.0.1:${(ser2net.address() as AddressInfo).port}` } }], { console_after_outcome: 5 }) };
  },
  async (server) => {
    ({ browser, admin } = await signedInAdmin(server));
  },
);
const consoleText = async (id: number) => await server.request(`/api/v2/devices/${id}/console`, { token: server.adminToken }).then((r) => r.text());

test("a board's attempt shows its console span folded in its row of the deployment's page; unfolded, what the board printed", async () => {
  const pkg = (await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id;
  const [board, plain] = await seedDevices(server, 2);
  await server.db.run("UPDATE devices SET mac_address = ?, name = 'board-7' WHERE id = ?", [MAC, board!.id]);
  const group = (await server.call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," }],
    ["POST", `/api/v2/groups/${group}/package`, { packages: [pkg] }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: [board!.id, plain!.id], remove: [] }],
  ] as const) {
    assert.equal((await server.call(method, path, json)).status, 200);
  }
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2" });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  await waitFor(() => sockets.size > 0, 10_000, "the console port connected");

  const token = server.server.ctx.tokens.issueDevice(MAC, board!.id, 30 * DAY);
  const res = await server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(MAC, { "svc.software.version": "v1" }) });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const socket = await openDeviceSocket(server.url, token, "board");
  try {
    let n = 0;
    const report = async (outcome: Record<string, unknown>) => {
      const acked = socket.next("update_outcome_ack");
      socket.send({ method: "update_outcome", id: `r-${++n}`, ...outcome });
      await acked;
    };
    await report({ state: "installing", version: "v2", from_version: "v1" });
    prints("Writing v2 to mmcblk0p2\r\nKernel panic - not syncing: VFS: Unable to mount root fs\r\n");
    await waitFor(async () => (await consoleText(board!.id)).includes("Kernel panic"), 10_000, "the install on the console");
    await report({ state: "failed", version: "v2", from_version: "v1", reason: "install command exited 1", output: "dd: error writing '/dev/mmcblk0p2'" });
  } finally {
    socket.ws.close();
  }
  server.clock.advance(6_000);
  await waitFor(async () => ((await server.call("GET", `/api/v2/deployments/${created.body.id}/console-spans`)).body as unknown[]).length === 1, 10_000, "the span saved");

  const { page } = admin;
  await page.goto(`${server.url}/#/deployments/${created.body.id}`);
  const row = page.locator(`tr[data-device="${board!.id}"]`);
  await row.getByText("install command exited 1").waitFor();
  const span = row.locator("details[data-console-span]");
  await span.getByText(/^console \(\d+ bytes\)$/).waitFor();
  assert.equal(await span.getAttribute("open"), null, "folded");
  await row.getByText("output", { exact: true }).click();
  await span.locator("summary").click();
  await span.getByText(/Kernel panic - not syncing/).waitFor();
  assert.match(await span.locator("pre").innerText(), /^Writing v2 to mmcblk0p2\s+Kernel panic/);
  await admin.shot("deployment-console-span", true);
  assert.equal(await page.locator(`tr[data-device="${plain!.id}"] details[data-console-span]`).count(), 0, "a device that is no board has no span");
});
