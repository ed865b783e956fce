/**
 * The New deployment dialog's Version field in a real browser, at 1366, 800 and 390 px: usable
 * before a group is chosen (every uploaded version, with its device types), narrowed to the
 * group's packages once one is, an empty state that says what to do, and never squeezed.
 * Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { adminPassword, launch, openTab, SIGNED_OUT, signIn } from "./browser.ts";

let browser: Browser;
after(() => browser?.close());
const server = useTestServer({}, async () => {
  browser = await launch();
});

test("the Version select lists every version before a group, the group's after, says why it is empty, and is not squeezed", async () => {
  for (const [version, devtype] of [["v2", "board"], ["v2", "camera"], ["v3", "board"]]) await uploadOk(server, { token: server.adminToken, version, devtype, file: Buffer.from(`${version} ${devtype}`) });
  const packages = (await server.call("GET", "/api/v1/packages")).body as Array<{ id: number; metadata: Record<string, string> }>;
  const v3 = packages.find((p) => Object.values(p.metadata).includes("v3"))!;
  const withV3 = (await server.call("POST", "/api/v2/groups", { metadata: { name: "v3 boards" } })).body.id;
  await server.call("POST", `/api/v2/groups/${withV3}/package`, { packages: [v3.id] });
  await server.call("POST", "/api/v2/groups", { metadata: { name: "empty group" } });

  for (const width of [1366, 800, 390]) {
    const tab = await openTab(browser, server.url, { width, height: 900 });
    const { page } = tab;
    try {
      await signIn(page, "admin", adminPassword(server.dataDir));
      await page.goto("/#/deployments");
      await page.getByRole("button", { name: "New deployment" }).click();
      const dialog = page.getByRole("dialog");
      const select = dialog.locator('select[name="version"]');
      await dialog.getByText("Every uploaded version").waitFor();
      assert.deepEqual(await select.locator("option").allInnerTexts(), ["choose a version…", "v2 (board, camera)", "v3 (board)"]);
      assert.equal(await select.isEnabled(), true, "usable before a group is chosen");
      const box = (await select.boundingBox())!;
      const dialogBox = (await dialog.boundingBox())!;
      assert.ok(box.width >= Math.min(200, dialogBox.width - 60), `the select is ${box.width} px wide in a dialog of ${dialogBox.width}`);
      assert.ok(dialogBox.x + dialogBox.width <= width, "the dialog fits");
      await select.selectOption("v2");
      await tab.shot(`deployment-form-no-group-${width}`);

      // A group without packages: the list is empty and says what to do; the version chosen is dropped.
      await dialog.locator('select[name="group"]').selectOption({ label: "empty group (0 devices, policy no_update,)" });
      await dialog.getByText("This group has no packages").waitFor();
      assert.equal(await select.isDisabled(), true);
      assert.deepEqual(await select.locator("option").allInnerTexts(), ["no versions"]);
      assert.equal(await dialog.getByRole("button", { name: "Start deployment" }).isDisabled(), true);
      await tab.shot(`deployment-form-empty-group-${width}`);

      // The group with v3: that version alone.
      await dialog.locator('select[name="group"]').selectOption({ label: "v3 boards (0 devices, policy no_update,)" });
      await dialog.getByText("The versions of the group's packages.").waitFor();
      assert.deepEqual(await select.locator("option").allInnerTexts(), ["choose a version…", "v3 (board)"]);
      assert.equal(await select.inputValue(), "");
      await select.selectOption("v3");
      assert.equal(await dialog.getByRole("button", { name: "Start deployment" }).isEnabled(), true);
      assert.ok(((await select.boundingBox())!.width) >= Math.min(200, dialogBox.width - 60));
      await tab.shot(`deployment-form-group-${width}`);
      tab.clean([SIGNED_OUT]);
    } finally {
      await tab.close();
    }
  }
});

test("a field error shows beside its field without the validation prefix, whether the server names the field or only its message does", async () => {
  for (const width of [1366, 390]) {
    const tab = await openTab(browser, server.url, { width, height: 900 });
    const { page } = tab;
    try {
      await signIn(page, "admin", adminPassword(server.dataDir));
      // An account with a bad name: the message ("name: 1 to 64 letters…") names the field.
      await page.goto("/#/users");
      await page.getByText("Add an account").click();
      const form = page.locator("form", { has: page.locator('input[name="name"]') });
      await form.locator('input[name="name"]').fill("bad name!");
      await form.locator('input[name="password"]').fill("a good long password");
      await form.getByRole("button", { name: "Create account" }).click();
      const nameField = form.locator("label.field", { has: page.locator('input[name="name"]') });
      await nameField.locator(".field-error").waitFor();
      assert.equal(await nameField.locator(".field-error").innerText(), "1 to 64 letters, digits, '_', '.' or '-'");
      assert.equal(await form.locator(".form-error").count(), 0, "nothing at the form's foot");
      assert.equal(await page.locator(".toast").count(), 0, "no message at the bottom");
      await tab.shot(`field-error-account-${width}`);

      // The server names the field in `field` (its message may say anything): beside that field.
      await page.route("**/api/v1/users", (route) =>
        route.request().method() === "POST" ? route.fulfill({ status: 400, contentType: "application/json", body: JSON.stringify({ error: "schema validation failed: is too weak", field: "password" }) }) : route.fallback(),
      );
      await form.locator('input[name="name"]').fill("good.name");
      await form.getByRole("button", { name: "Create account" }).click();
      const passwordField = form.locator("label.field", { has: page.locator('input[name="password"]') });
      await passwordField.locator(".field-error", { hasText: /^is too weak$/ }).waitFor();
      assert.equal(await nameField.locator(".field-error").count(), 0, "the earlier error is gone");
      await page.unroute("**/api/v1/users");

      // The deployment dialog: a field the server refuses ('schema validation failed: field "retries" …').
      await page.goto("/#/deployments");
      await page.getByRole("button", { name: "New deployment" }).click();
      const dialog = page.getByRole("dialog");
      await dialog.locator('select[name="group"]').selectOption({ label: "v3 boards (0 devices, policy no_update,)" });
      await dialog.locator('select[name="version"]').selectOption("v3");
      await dialog.locator('input[name="phases"]').fill("50, 80");
      await dialog.getByRole("button", { name: "Start deployment" }).click();
      const phases = dialog.locator("label.field", { has: page.locator('input[name="phases"]') });
      await phases.locator(".field-error").waitFor();
      assert.doesNotMatch(await phases.locator(".field-error").innerText(), /schema validation failed|field "phases"/);
      assert.equal(await dialog.locator(".form-error").count(), 0);
      await tab.shot(`field-error-deployment-${width}`);
      tab.clean([SIGNED_OUT, /^400 POST \/api\/v1\/users$/, /^400 POST \/api\/v2\/deployments$/]);
    } finally {
      await tab.close();
    }
  }
});
