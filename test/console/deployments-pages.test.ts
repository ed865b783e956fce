/**
 * Deployments in a real browser, with in-process agents: the New deployment dialog, a first phase
 * that pauses on a failing install (its reason and output in the device table), Resume, Next
 * phase, a rollout that completes live, an abort, and the update history on a device's page; at
 * 1280x800 and at 390 px wide. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { tempDir, useTestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { adminPassword, openTab, SIGNED_OUT, signedInAdmin, signIn, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
const agents: Array<ReturnType<typeof startAgent>> = [];
after(async () => {
  for (const agent of agents) await agent.stop();
  await browser?.close();
});
const server = useTestServer(FAST_SERVER, async (server) => {
  ({ browser, admin } = await signedInAdmin(server));
});

const nav = (page: Page, name: string) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true }).click();
const flags = tempDir("labgate-deploy-flags-");
/** Fails while its flag file exists: `exit 3` with some output. */
const installer = (flag: string) => ["sh", "-c", 'if [ -e "$2" ]; then echo "writing slot B"; echo "error: slot B is read-only" >&2; exit 3; fi; echo ok', "install", "{file}", flag];

let ids: number[] = [];
let group = 0;
/** The first deployment, and its device that failed. */
let first = 0;
let failedOnce = 0;

test("a deployment from the dialog: the first phase pauses on a failure with its output; resume, next phase, completed live", async () => {
  const { page } = admin;
  // Six boards at v1 that check only when told (checkNow), and a group with the v2 package.
  for (let i = 0; i < 6; i++) {
    agents.push(startAgent(server, { name: `rack-${i + 1}`, device_type: "board", software_version: "v1", install_command: installer(join(flags, `fail-${i}`)), update_check_interval: 3600 }));
  }
  ids = [];
  for (const agent of agents) ids.push(await approveAgent(server, agent));
  for (const id of ids) await untilConnected(server, id);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("v2 image") });
  group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "rack boards" } })).body.id;
  await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
  await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: ids, remove: [] });

  await nav(page, "Deployments");
  await page.getByText("No deployments yet").waitFor();
  await page.getByRole("button", { name: "New deployment" }).click();
  const dialog = page.getByRole("dialog");
  await dialog.locator('select[name="group"]').selectOption({ label: "rack boards (6 devices, policy no_update,)" });
  await dialog.locator('select[name="version"]').selectOption("v2");
  await dialog.locator('input[name="phases"]').fill("33, 100");
  await dialog.locator('input[name="success_percent"]').fill("100");
  await dialog.locator('input[name="error_percent"]').fill("40");
  await dialog.locator('input[name="retries"]').fill("0");
  await admin.shot("deployment-new");
  await dialog.getByRole("button", { name: "Start deployment" }).click();
  await page.getByRole("heading", { name: /Deployment #\d+: v2/ }).waitFor();
  const id = Number(/#\/deployments\/(\d+)/.exec(page.url())![1]);

  // Phase 1's two devices: one fails (its flag), one installs.
  const phase0 = ((await server.call("GET", `/api/v2/deployments/${id}/devices?phase=0`)).body as Array<{ device: number }>).map((m) => m.device);
  assert.equal(phase0.length, 2);
  const [bad, good] = phase0.map((d) => agents[ids.indexOf(d)]);
  first = id;
  failedOnce = phase0[0];
  writeFileSync(join(flags, `fail-${ids.indexOf(phase0[0])}`), "");
  await Promise.all([bad.checkNow(), good.checkNow()]);
  await page.getByText(/Paused:.*error threshold/).waitFor();
  const failedRow = page.locator(`tr[data-device="${phase0[0]}"]`);
  await failedRow.getByText("install command exited with 3").waitFor();
  await failedRow.getByText("output").click();
  assert.match(await failedRow.locator("pre").innerText(), /writing slot B\nerror: slot B is read-only/);
  await page.locator(`tr[data-device="${phase0[1]}"][data-state="installed"]`).waitFor();
  await admin.shot("deployment-paused", true);

  // Resume; the phase finished below its gate: a person starts the next one.
  rmSync(join(flags, `fail-${ids.indexOf(phase0[0])}`));
  await page.getByRole("button", { name: "Resume" }).click();
  await page.getByText(/finished below its gate/).waitFor();
  await page.getByRole("button", { name: "Next phase" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Start next phase" }).click();
  await page.locator('tr[data-phase="1"].current').waitFor();
  await Promise.all(agents.filter((a) => a !== bad && a !== good).map((a) => a.checkNow()));
  // Completed without a reload, with its failure said: the counts and the status move with the events.
  await page.locator(".badge-partial", { hasText: "completed with failures" }).waitFor();
  assert.match(await page.locator("tr[data-phase='1']").innerText(), /4 of 4 installed/);
  assert.equal((await server.call("GET", `/api/v2/groups/${group}`)).body.policy, "exact_match,v2");
  await admin.shot("deployment-completed", true);

  // The list: its row with the stacked bar, and the filter of its status.
  await nav(page, "Deployments");
  const row = page.locator(`tr[data-deployment="${id}"]`);
  await row.getByText("completed with failures").waitFor();
  assert.match(await row.innerText(), /v2[\s\S]*rack boards[\s\S]*2 of 2[\s\S]*5 of 6 up to date · 1 failed/);
  await page.getByRole("combobox", { name: "Status" }).selectOption("completed_with_failures");
  await page.locator(`tr[data-deployment="${id}"]`).waitFor();
  await admin.shot("deployments-list");

  // Retry failed: the deployment runs again for the failed board, which installs this time.
  await bad.checkNow();
  assert.equal(bad.softwareVersion, "v1", "the group's policy does not offer the failed board v2");
  await page.goto(`/#/deployments/${id}`);
  await page.getByRole("button", { name: "Retry failed" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Retry failed" }).click();
  await page.locator(".page-header .badge", { hasText: "running" }).waitFor();
  await bad.checkNow();
  await page.locator(".page-header .badge", { hasText: /^completed$/ }).waitFor();
  assert.equal(bad.softwareVersion, "v2");
  admin.clean([SIGNED_OUT]);
});

test("abort from the deployment page: nobody is offered the version; the device page shows the update history", async () => {
  const { page } = admin;
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v3", devtype: "board", file: Buffer.from("v3 image") });
  await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [...(await server.call("GET", `/api/v2/groups/${group}`)).body.packages, pkg.id] });
  await nav(page, "Deployments");
  await page.getByRole("button", { name: "New deployment" }).click();
  const dialog = page.getByRole("dialog");
  await dialog.locator('select[name="group"]').selectOption({ label: "rack boards (6 devices, policy exact_match,v2)" });
  await dialog.locator('select[name="version"]').selectOption("v3");
  await dialog.getByRole("button", { name: "Start deployment" }).click();
  await page.getByRole("heading", { name: /Deployment #\d+: v3/ }).waitFor();
  await page.getByRole("button", { name: "Abort" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Abort" }).click();
  await page.locator(".page-header .badge", { hasText: "aborted" }).waitFor();
  await Promise.all(agents.map((a) => a.checkNow()));
  for (const agent of agents) assert.equal(agent.softwareVersion, "v2", "nobody was offered v3 after the abort");

  // The board that failed in the first deployment installed v2 at its retry there.
  await page.goto(`/#/devices/${failedOnce}`);
  const card = page.locator("section.card", { hasText: "Update history" });
  await card.locator("tr[data-history]").nth(1).waitFor();
  // Installed at the retry of the first deployment (not in the aborted one of v3), after failing there.
  assert.match(await card.innerText(), /v1 → v2\s+installed\s+#1 attempt 2[\s\S]*v1 → v2\s+failed\s+install command exited with 3[\s\S]*#1 attempt 1/);
  await admin.shot("device-update-history", true);

  // Narrow: the deployment page still reads.
  const narrow = await openTab(browser, server.url, { width: 390, height: 844 });
  try {
    await signIn(narrow.page, "admin", adminPassword(server.dataDir));
    await narrow.page.goto(`/#/deployments/${first}`);
    await narrow.page.getByRole("heading", { name: /Deployment #\d+/ }).waitFor();
    await narrow.shot("deployment-narrow", true);
    narrow.clean([SIGNED_OUT]);
  } finally {
    await narrow.close();
  }
  admin.clean([SIGNED_OUT]);
});
