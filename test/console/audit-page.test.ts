/**
 * The Audit page and a device page's recent entries in a real browser (issue 29): entries of
 * changes made through the API, filters, paging, the CSV download. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  ({ browser, admin } = await signedInAdmin(server));
});

test("the Audit page lists, filters and pages entries and downloads them as CSV; a device page shows its own", async () => {
  const { id } = await registerDevice(server);
  await server.call("PATCH", `/api/v2/devices/${id}`, { name: "bench-audit" });
  for (let i = 0; i < 60; i++) await server.call("POST", "/api/v2/groups", { metadata: { name: `g${i}` } });
  const { page } = admin;
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Audit log", exact: true }).click();
  const table = page.getByRole("table", { name: "Audit log" });
  await table.waitFor();
  assert.equal(await table.locator("tbody tr").count(), 50, "a page of 50");
  await admin.shot("audit");

  await page.getByLabel("Action").fill("device");
  await page.locator('tr[data-action="device.rename"]').waitFor();
  await page.waitForFunction(() => document.querySelectorAll('table[aria-label="Audit log"] tbody tr').length === 2);
  assert.deepEqual(await table.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-action"))), ["device.rename", "device.approve"]);
  assert.match(page.url(), /action=device/);
  await admin.shot("audit-filtered");

  const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Download CSV" }).click()]);
  const csv = readFileSync((await download.path())!, "utf8").trim().split("\r\n");
  assert.equal(csv.length, 3, "a header and the two filtered entries");
  assert.match(csv[1], /device\.rename/);

  await page.goto(`${server.url}/#/devices/${id}`);
  const recent = page.getByRole("table", { name: "Recent audit entries" });
  await recent.waitFor();
  assert.match(await recent.innerText(), /device\.rename[\s\S]*device\.approve/);
  await admin.shot("device-audit");
});
