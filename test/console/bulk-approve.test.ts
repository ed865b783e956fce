/**
 * Acting on many (issue 47.2): the Registrations page approves 50 pending devices in one action
 * (a checkbox per row, "select all shown", the bulk bar), its rows keep their order while devices
 * ask again, and the bulk API applies the single approval's checks to each. Screenshots at 1366,
 * 800 and 390 px in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { deviceClient } from "../update/helpers/devices.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  ({ browser, admin } = await signedInAdmin(server));
});

const pendingOrder = async () => (await server.call<Array<{ mac_address: string }>>("GET", "/api/v1/auth/pending")).body.map((p) => p.mac_address);

test("bulk approval of 50 pending devices in one action; the list keeps its order when devices ask again", async () => {
  const clients = Array.from({ length: 52 }, () => deviceClient(server));
  for (const client of clients) assert.equal((await client.authorize()).status, "pending");
  const first = await pendingOrder();
  // Asking again (newest last_appeared) moves nothing.
  await clients[0]!.authorize();
  await clients[10]!.authorize();
  assert.deepEqual(await pendingOrder(), first);

  const { page } = admin;
  for (const [width, height] of [[1366, 900], [800, 900], [390, 844]] as const) {
    await page.setViewportSize({ width, height });
    await page.goto("/#/registrations");
    await page.reload();
    await page.locator("tbody tr").first().waitFor();
    await page.getByLabel("Select all shown").check();
    await page.getByRole("region", { name: "Selected rows" }).getByText("50 selected").waitFor();
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), `no horizontal overflow at ${width} px`);
    await admin.shot(`bulk-approve-selected-${width}`);
    await page.getByLabel("Select all shown").uncheck();
    await page.getByRole("region", { name: "Selected rows" }).waitFor({ state: "detached" });
  }
  await page.setViewportSize({ width: 1366, height: 900 });
  const rows = await page.locator("tbody tr").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-mac")));
  assert.deepEqual(rows, first.slice(0, 50), "the page lists them in the order they first asked");

  await page.getByLabel("Select all shown").check();
  await page.getByLabel(`Select ${first[1]}`).uncheck();
  await page.getByLabel(`Select ${first[1]}`).check();
  await page.getByRole("region", { name: "Selected rows" }).getByRole("button", { name: "Approve 50" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Approve" }).click();
  await page.getByText("50 approved").waitFor();
  await page.getByRole("navigation", { name: "Pages" }).getByText(/^1–2 of 2$/).waitFor();
  assert.deepEqual(await pendingOrder(), first.slice(50));
  const devices = (await server.call<Array<{ mac_address: string }>>("GET", "/api/v2/devices")).body.map((d) => d.mac_address).sort();
  assert.deepEqual(devices, first.slice(0, 50).sort());
  await closeMessages(page);
  await admin.shot("bulk-approve-done");
  admin.clean([SIGNED_OUT]);
});

test("the bulk API: each registration gets the single approval's checks; bad bodies are 400 and change nothing", async () => {
  const [a, b] = [deviceClient(server), deviceClient(server)];
  await a.authorize();
  await b.authorize();
  const before = (await server.call("GET", "/api/v2/devices")).body.length;
  for (const body of [{}, { registrations: [] }, { registrations: [{ mac_address: a.mac }] }, { registrations: Array.from({ length: 201 }, () => ({ mac_address: a.mac, public_key: a.publicKeyPem })) }]) {
    const res = await server.call("POST", "/api/v1/auth/register/bulk", body);
    assert.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
    assert.match(res.body.error, /schema validation failed/);
  }
  assert.equal((await server.call("GET", "/api/v2/devices")).body.length, before);
  const res = await server.call("POST", "/api/v1/auth/register/bulk", {
    registrations: [
      { mac_address: a.mac, public_key: a.publicKeyPem },
      { mac_address: "02:00:00:00:00:99", public_key: b.publicKeyPem },
      { mac_address: b.mac, public_key: b.publicKeyPem },
    ],
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.approved, 2);
  assert.deepEqual(
    res.body.results.map((r: { error: string | null }) => r.error),
    [null, "specified registration does not exist", null],
  );
  const c = deviceClient(server);
  await c.authorize();
  const anonymous = await server.request("/api/v1/auth/register/bulk", { method: "POST", json: { registrations: [{ mac_address: c.mac, public_key: c.publicKeyPem }] } });
  assert.equal(anonymous.status, 401);
  assert.ok((await pendingOrder()).includes(c.mac), "refused: still pending");
});
