/**
 * The runs list shows a gateway run's cases by status and how long it took, as it does for a run
 * on devices (issue 47.4); a run that ended before counts were kept shows none, not zeros.
 * Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

const MIXED = "tests:\n  g:\n  - exec: {name: ok, command: 'true'}\n  - exec: {name: bad, command: 'false'}\n  - exec: {name: ok2, command: 'true'}\n";

let browser: Browser;
let admin: Tab;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  await uploadConfig(server, "mixed.yml", MIXED);
  ({ browser, admin } = await signedInAdmin(server));
});

test("the runs list: a gateway run's passed and failed cases and its duration; a run from before counts were kept shows a dash", async () => {
  const old = await waitRun(server, (await trigger(server, { config_name: "mixed.yml" })).id);
  // What migration 031 leaves of a run that ended before it.
  await server.db.run("UPDATE testrun_runs SET passed = NULL, failed = NULL, skipped = NULL WHERE id = ?", [old.id]);
  const run = await waitRun(server, (await trigger(server, { config_name: "mixed.yml" })).id);
  assert.equal(run.status, "failed");

  const { page } = admin;
  await page.setViewportSize({ width: 1366, height: 768 });
  await page.goto("/#/runs");
  const listed = page.locator(`tr[data-run="${run.id}"]`);
  await listed.waitFor();
  assert.equal(await listed.locator("[data-counts]").innerText(), "2 passed · 1 failed");
  assert.match(await listed.innerText(), /took \d+ s/);
  const before = page.locator(`tr[data-run="${old.id}"]`);
  assert.equal(await before.locator("[data-counts]").count(), 0);
  assert.ok((await before.innerText()).includes("–"), await before.innerText());
  await admin.shot("run-counts-list-1366");
  admin.clean([SIGNED_OUT]);
});
