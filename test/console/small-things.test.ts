/**
 * Small things that mislead (issue 47.6): relative times move on (one clock tick for the page),
 * a device page's audit card shows an action done on the page at once, and the login page names
 * the admin password file as `<data dir>/admin.password`, and a config page fits 390 px (its
 * YAML scrolls inside its box). Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { uploadConfig } from "../testrun/run-helpers.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { adminPassword, launch, openTab, signIn, SIGNED_OUT } from "./browser.ts";

let browser: Browser;
let device = 0;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  device = (await registerDevice(server)).id;
  await server.call("PATCH", `/api/v2/devices/${device}`, { name: "bench-tick" });
  browser = await launch();
});

test("the login page names <data dir>/admin.password", async () => {
  const tab = await openTab(browser, server.url, { width: 390, height: 844 });
  try {
    await tab.page.goto("/");
    const hint = await tab.page.locator(".login .hint").innerText();
    assert.match(hint, /<data dir>\/admin\.password/);
    assert.doesNotMatch(hint, new RegExp(server.dataDir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")), "the real path is not shown to a signed-out visitor");
    await tab.shot("small-things-login-390");
    tab.clean([SIGNED_OUT]);
  } finally {
    await tab.close();
  }
});

test("relative times move on without a reload; the device page's audit card shows a tag added on the page", async () => {
  const tab = await openTab(browser, server.url, { width: 1366, height: 900 });
  try {
    const { page } = tab;
    await page.clock.install();
    await signIn(page, "admin", adminPassword(server.dataDir));
    await page.goto(`/#/devices/${device}`);
    const audit = page.locator("section.card", { has: page.getByRole("heading", { name: "Audit log" }) });
    const rename = audit.locator("tbody tr").first();
    await rename.getByText("device.rename").waitFor();
    assert.equal(await rename.locator("time").innerText(), "just now");
    await page.clock.runFor(3 * 60_000);
    await rename.locator("time", { hasText: "3 min ago" }).waitFor();

    await page.getByLabel("New tag").fill("lab-a");
    await page.getByLabel("New tag").press("Enter");
    await audit.locator("tbody tr").first().getByText("device.tag").waitFor();
    await audit.scrollIntoViewIfNeeded();
    await tab.shot("small-things-device-audit");
    tab.clean([SIGNED_OUT]);
  } finally {
    await tab.close();
  }
});

test("a config page fits 390, 800 and 1366 px: its YAML box scrolls inside", async () => {
  const long = `      command: [sh, -c, 'echo ${"a-long-argument ".repeat(12).trim()}']`;
  await uploadConfig(server, "wide.yml", ["tests:", "  bench:", "  - exec:", "      name: A check with a long command line", long, ""].join("\n"));
  for (const [width, height] of [[390, 844], [800, 900], [1366, 900]] as const) {
    const tab = await openTab(browser, server.url, { width, height });
    try {
      await signIn(tab.page, "admin", adminPassword(server.dataDir));
      await tab.page.goto("/#/configs/wide.yml");
      const yaml = tab.page.locator("pre.yaml");
      await yaml.getByText("a-long-argument", { exact: false }).waitFor();
      const fit = await tab.page.evaluate(() => ({ page: document.documentElement.scrollWidth - document.documentElement.clientWidth, box: (() => { const b = document.querySelector("pre.yaml")!; return b.scrollWidth - b.clientWidth; })() }));
      assert.equal(fit.page, 0, `the page does not scroll sideways at ${width} px`);
      if (width < 1366) assert.ok(fit.box > 0, "the long line scrolls inside the YAML box");
      await tab.shot(`small-things-config-${width}`);
      tab.clean([SIGNED_OUT]);
    } finally {
      await tab.close();
    }
  }
});
