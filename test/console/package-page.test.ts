/**
 * A package at its own address (issue 47.4): `#/packages/<id>` shows its metadata, stored file,
 * full SHA-256, and the groups and deployments that use it (GET /api/v1/packages/{id}/usage).
 * Screenshots at 1366, 800 and 390 px in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
let pkg: { id: number; sha256: string } = { id: 0, sha256: "" };
let group = 0;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  pkg = (await uploadOk(server, { token: server.adminToken, version: "4.2.0", devtype: "board" })) as { id: number; sha256: string };
  group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "Rack nine" } })).body.id;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  ({ browser, admin } = await signedInAdmin(server));
});

test("the package page: metadata, full SHA-256, and the groups that use it", async () => {
  const usage = await server.call("GET", `/api/v1/packages/${pkg.id}/usage`);
  assert.equal(usage.status, 200);
  assert.deepEqual(usage.body, { groups: [{ id: group, name: "Rack nine" }], deployments: [] });
  assert.equal((await server.call("GET", "/api/v1/packages/999/usage")).status, 404);
  assert.equal((await server.request(`/api/v1/packages/${pkg.id}/usage`)).status, 401);

  const { page } = admin;
  await page.goto("/#/packages");
  await page.locator(`tr[data-package="${pkg.id}"] a`, { hasText: "4.2.0" }).click();
  await page.waitForURL(new RegExp(`#/packages/${pkg.id}$`));
  for (const [width, height] of [[1366, 900], [800, 900], [390, 844]] as const) {
    await page.setViewportSize({ width, height });
    await page.locator("[data-sha256]").waitFor();
    assert.equal(await page.locator("[data-sha256]").innerText(), pkg.sha256, "the full SHA-256");
    await page.getByRole("list", { name: "Groups" }).getByRole("link", { name: "Rack nine" }).waitFor();
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), `no horizontal overflow at ${width} px`);
    await closeMessages(page);
    await admin.shot(`package-page-${width}`);
  }
  admin.clean([SIGNED_OUT]);
});
