/**
 * The Audit page and a device page's recent entries in a real browser (issue 29): entries of
 * changes made through the API, filters, paging, the CSV download. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { login } from "../accounts/helpers.ts";
import { entries, flood } from "../audit/helpers.ts";
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

test("refusals read as one entry with their count; a failed login as anonymous with the name tried (issues 39.4, 40.5)", async () => {
  assert.equal((await login(server, "admin", "not the password")).status, 401);
  await flood(server.url, 1234, (i) => ({ method: "POST", path: `/api/v2/groups/${i}/priority`, headers: { Origin: "http://evil.example" } }));
  // The window ends: the entry's count is written.
  server.clock.advance(60_000);
  await waitFor(async () => (await entries(server, "action=auth.refused&limit=1"))[0]?.detail?.count === 1234, 5000, "the window's count");
  const { page } = admin;
  await page.goto(`${server.url}/#/audit?action=auth`);
  const row = page.locator('tr[data-action="auth.refused"]');
  await row.waitFor();
  assert.equal(await row.count(), 1, "one entry for the 1,234 refusals");
  assert.match(await row.innerText(), /anonymous[\s\S]*127\.0\.0\.1[\s\S]*auth\.refused[\s\S]*refused[\s\S]*×1,234[\s\S]*POST \/api\/v2\/groups\/:id\/priority/);
  await admin.shot("audit-refusals");
  await page.getByLabel("Action").fill("login.failure");
  const failure = page.locator('tr[data-action="login.failure"]');
  await failure.waitFor();
  assert.match(await failure.innerText(), /anonymous \(tried 'admin'\)/);
  assert.doesNotMatch(await failure.innerText(), /system/);
  await admin.shot("audit-login-failure");
});
