/**
 * Names instead of ids (issue 47.3): the audit log names its targets (a device's name for
 * `device:4`, a group's for `group:1`, a package's version and type), `group.create`'s detail has
 * the group's name, the Users page folds one account's permissions on one thing into a row named
 * by it, and the permission form picks a device, group or package by name. Screenshots at 1366,
 * 800 and 390 px in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
let device = 0;
let group = 0;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  device = (await registerDevice(server)).id;
  await server.call("PATCH", `/api/v2/devices/${device}`, { name: "bench-gw-7" });
  group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "Rack seven" } })).body.id;
  assert.equal((await server.call("POST", "/api/v1/users", { name: "dana", password: "dana-password-1", scopes: [] })).status, 201);
  ({ browser, admin } = await signedInAdmin(server));
});

const SIZES = [
  [1366, 900],
  [800, 900],
  [390, 844],
] as const;

test("the audit log names devices and groups; group.create's detail has the name", async () => {
  const audit = await server.call("GET", "/api/v1/audit?limit=10");
  const created = (audit.body as Array<{ action: string; target: string; target_name: string | null; detail: Record<string, unknown> }>).find((e) => e.action === "group.create")!;
  assert.deepEqual([created.target, created.target_name, created.detail.name], [`group:${group}`, "Rack seven", "Rack seven"]);
  const renamed = (audit.body as Array<{ action: string; target_name: string | null }>).find((e) => e.action === "device.rename")!;
  assert.equal(renamed.target_name, "bench-gw-7");
  const { page } = admin;
  for (const [width, height] of SIZES) {
    await page.setViewportSize({ width, height });
    await page.goto("/#/audit");
    await page.reload();
    const row = page.locator('tr[data-action="group.create"]');
    await row.getByText("Rack seven", { exact: true }).first().waitFor();
    assert.match(await page.locator('tr[data-action="device.rename"]').innerText(), /bench-gw-7\s+device:\d+/);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), `no horizontal overflow at ${width} px`);
    await admin.shot(`names-audit-${width}`);
  }
  admin.clean([SIGNED_OUT]);
});

test("the Users page: permissions picked by name, named, and one account's on one thing folded into a row", async () => {
  const { page } = admin;
  await page.setViewportSize({ width: 1366, height: 900 });
  await page.goto("/#/users");
  await page.reload();
  const form = page.locator("form", { has: page.getByRole("button", { name: "Add permission" }) });
  await form.locator('select[name="user"]').selectOption("dana");
  await form.getByLabel("Find a device").fill("bench-gw");
  await form.getByLabel("Choose a device").locator("option", { hasText: "bench-gw-7" }).waitFor({ state: "attached" });
  await form.getByLabel("Choose a device").selectOption(String(device));
  await form.getByRole("button", { name: "Add permission" }).click();
  await page.getByText("Permission added").waitFor();
  for (const permission of ["read", "update"]) {
    await form.locator('select[name="user"]').selectOption("dana");
    await form.locator('select[name="permission"]').selectOption(permission);
    await form.locator('select[name="resource"]').selectOption("group");
    await form.getByLabel("Choose a group").locator("option", { hasText: "Rack seven" }).waitFor({ state: "attached" });
    await form.getByLabel("Choose a group").selectOption(String(group));
    await form.getByRole("button", { name: "Add permission" }).click();
    await page.locator('table[aria-label="Permissions"] tr[data-user="dana"]', { hasText: "Rack seven" }).getByText(permission, { exact: true }).waitFor();
  }
  const rows = page.locator('table[aria-label="Permissions"] tr[data-user="dana"]');
  assert.equal(await rows.count(), 2, "one row per thing");
  assert.match(await rows.filter({ hasText: "Rack seven" }).innerText(), /group\s+Rack seven\s+#\d+\s+read\s*×\s*update\s*×/);
  assert.match(await rows.filter({ hasText: "bench-gw-7" }).innerText(), /device\s+bench-gw-7/);
  const held = (await server.call("GET", "/api/v1/permissions")).body as Array<{ user_id: string; resource: string; resource_id: number; permission: string }>;
  assert.deepEqual(held.filter((p) => p.user_id === "dana").map((p) => `${p.resource}:${p.resource_id}:${p.permission}`).sort(), [`device:${device}:read`, `group:${group}:read`, `group:${group}:update`]);
  assert.equal("resource_label" in held[0]!, false, "the plain list keeps the reference's fields");
  for (const [width, height] of SIZES) {
    await page.setViewportSize({ width, height });
    await closeMessages(page);
    await page.locator('table[aria-label="Permissions"]').scrollIntoViewIfNeeded();
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), `no horizontal overflow at ${width} px`);
    await admin.shot(`names-users-${width}`);
  }
  admin.clean([SIGNED_OUT]);
});
