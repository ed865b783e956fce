/*
 * Devices of other protocols in the console: the Devices page adds a DDI target and shows its
 * token once (the token then works at the DDI API); the page of a DDI device and of a Mender
 * device says its protocol and shows actions, shell and file download as unavailable, without a
 * request that fails. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
let menderId = 0;
after(async () => {
  await browser?.close();
});

/** A Mender client's auth request, signed as mender-client signs it; approved through the API. */
async function menderDevice(server: { url: string; call: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }> }): Promise<number> {
  const pair = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const pubkey = pair.publicKey.export({ type: "spki", format: "pem" }) as string;
  const body = Buffer.from(JSON.stringify({ id_data: JSON.stringify({ mac: "02:4d:45:00:00:09" }), pubkey }));
  const ask = () => fetch(`${server.url}/api/devices/v1/authentication/auth_requests`, { method: "POST", headers: { "content-type": "application/json", "x-men-signature": sign("sha256", body, pair.privateKey).toString("base64") }, body });
  assert.equal((await ask()).status, 401);
  assert.equal((await server.call("POST", "/api/v1/auth/register", { mac_address: "02:4d:45:00:00:09", public_key: pubkey })).status, 200);
  assert.equal((await ask()).status, 200);
  return (await server.call("GET", "/api/v2/devices")).body.find((d: { mac_address: string }) => d.mac_address === "02:4d:45:00:00:09").id;
}

const server = useTestServer({}, async (server) => {
  menderId = await menderDevice(server);
  ({ browser, admin } = await signedInAdmin(server));
});

test("the Devices page adds a DDI target and shows its token once; its page and a Mender device's show what their protocol cannot do", async () => {
  const { page } = admin;
  await page.goto("/#/devices");
  await page.getByRole("button", { name: "Add DDI target" }).click();
  await page.getByLabel(/^Controller id/).fill("swu-bench-3");
  await page.getByLabel("Name", { exact: true }).fill("Bench 3");
  await page.getByLabel("Device type", { exact: true }).fill("imx8");
  await admin.shot("ddi-target-form");
  await page.getByRole("button", { name: "Add target" }).click();
  const token = (await page.getByLabel("Target token").textContent())!.trim();
  await admin.shot("ddi-target-token");
  const poll = await fetch(`${server.url}/DEFAULT/controller/v1/swu-bench-3`, { headers: { authorization: `TargetToken ${token}` } });
  assert.equal(poll.status, 200);
  await page.getByRole("button", { name: "Done" }).click();
  await page.getByRole("link", { name: "Bench 3" }).click();

  for (const [label, name] of [["hawkBit DDI (SWUpdate or RAUC)", "ddi"], ["Mender's client", "mender"]] as const) {
    if (name === "mender") await page.goto(`/#/devices/${menderId}`);
    await page.getByText(`Not available: this device runs ${label}`).waitFor();
    assert.equal(await page.locator("dd", { hasText: label }).count(), 1, "the protocol in the details");
    assert.equal(await page.getByRole("heading", { name: "Actions", exact: true }).count(), 0);
    assert.equal(await page.getByText("Download a file from the device").count(), 0);
    await closeMessages(page);
    await admin.shot(`device-page-${name}`, true);
  }
  admin.clean([SIGNED_OUT]);
});
