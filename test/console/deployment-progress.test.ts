/**
 * A deployment's progress over time and the fleet's versions, in a real browser with in-process
 * agents on the server's clock: the chart on the deployment page moves while the deployment runs
 * (minutes passed by the clock), and the versions view after it, at 1366, 800 and 390 px.
 * Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { adminPassword, closeMessages, openTab, SIGNED_OUT, signedInAdmin, signIn, type Tab } from "./browser.ts";

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

const MINUTE = 60_000;
const WIDTHS = [1366, 800, 390];
let deployment = 0;

/** The chart's counts at its last point ("waiting=2 installed=2"), as the page shows them. */
const lastCounts = (tab: Tab) => tab.page.locator("figure.chart").getAttribute("data-last");

test("the deployment chart moves while the deployment runs: a point a minute, the last one now", async () => {
  const { page } = admin;
  // Four boards at v1 on the server's clock (their signed requests keep its time), checking only when told.
  for (let i = 0; i < 4; i++) agents.push(startAgent(server, { name: `bench-${i + 1}`, device_type: "board", software_version: "v1", install_command: ["sh", "-c", "echo ok"], update_check_interval: 3600 }, { clock: server.clock }));
  const ids: number[] = [];
  for (const agent of agents) ids.push(await approveAgent(server, agent));
  for (const id of ids) await untilConnected(server, id);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: Buffer.from("v2 image") });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "bench boards" } })).body.id;
  await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
  await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: ids, remove: [] });
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "v2", phases: [50, 100], success_percent: 100, retries: 0 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  deployment = created.body.id;

  await page.goto(`/#/deployments/${deployment}`);
  const chart = page.locator("figure.chart");
  await chart.waitFor();
  assert.equal(await lastCounts(admin), "waiting=4");

  // A minute later the first phase's boards install: the chart's last point follows without a reload.
  server.clock.advance(MINUTE);
  const phase0 = ((await server.call("GET", `/api/v2/deployments/${deployment}/devices?phase=0`)).body as Array<{ device: number }>).map((m) => agents[ids.indexOf(m.device)]);
  await Promise.all(phase0.map((a) => a.checkNow()));
  await page.locator('tr[data-state="installed"]').nth(1).waitFor();
  await page.locator('figure.chart[data-last="waiting=2 installed=2"]').waitFor();
  assert.ok(Number(await chart.getAttribute("data-points")) >= 2);
  await page.locator("figure.chart path[data-series='installed']").waitFor();

  // Two minutes on, the second phase: the chart ends with all four installed, one point a minute.
  server.clock.advance(2 * MINUTE);
  const phase1 = agents.filter((a) => !phase0.includes(a));
  await Promise.all(phase1.map((a) => a.checkNow()));
  await page.locator('figure.chart[data-last="installed=4"]').waitFor();
  await page.locator(".page-header .badge", { hasText: /^completed$/ }).waitFor();
  const timeline = (await server.call("GET", `/api/v2/deployments/${deployment}/timeline`)).body as { step_minutes: number; points: Array<{ counts: Record<string, number> }> };
  assert.equal(timeline.step_minutes, 1);
  assert.deepEqual(
    timeline.points.map((p) => [p.counts.waiting, p.counts.installed]),
    [
      [4, 0],
      [4, 0],
      [2, 2],
      [2, 2],
      [0, 4],
    ],
    "at the creation, each minute after it (the installs came just after a minute began), and at the end",
  );
  await closeMessages(page);
  await admin.shot("deployment-chart-1280", true);
  admin.clean([SIGNED_OUT]);

  for (const width of WIDTHS) {
    const tab = await openTab(browser, server.url, { width, height: 900 });
    try {
      await signIn(tab.page, "admin", adminPassword(server.dataDir));
      await tab.page.goto(`/#/deployments/${deployment}`);
      await tab.page.locator('figure.chart[data-last="installed=4"]').waitFor();
      const box = await tab.page.locator("figure.chart svg").boundingBox();
      assert.ok(box && box.width > 200 && box.x + box.width <= width, `the chart fits ${width} px: ${JSON.stringify(box)}`);
      assert.ok(await tab.page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), `nothing wider than ${width} px`);
      await tab.shot(`deployment-chart-${width}`, true);
      tab.clean([SIGNED_OUT]);
    } finally {
      await tab.close();
    }
  }
});

test("the versions view after the deployment: per device type and per group, only what the caller may read", async () => {
  const { page } = admin;
  // A fifth board of another type, in no group, still at v1.
  const camera = startAgent(server, { name: "camera-1", device_type: "camera", software_version: "c1" }, { clock: server.clock });
  agents.push(camera);
  const cameraId = await approveAgent(server, camera);
  const all = (await server.call("GET", "/api/v2/devices/versions")).body as { by_device_type: unknown[]; by_group: unknown[] };
  assert.deepEqual(all.by_device_type, [
    { device_type: "board", devices: 4, versions: [{ version: "v2", devices: 4 }], others: 0 },
    { device_type: "camera", devices: 1, versions: [{ version: "c1", devices: 1 }], others: 0 },
  ]);
  assert.deepEqual(all.by_group, [{ group: 1, name: "bench boards", devices: 4, versions: [{ version: "v2", devices: 4 }], others: 0 }]);
  // A user who may read the camera alone sees it alone, and no group.
  await server.call("POST", "/api/v1/permissions", { user_id: "viewer", resource: "device", resource_id: cameraId, permission: "read" });
  const own = await server.request("/api/v2/devices/versions", { token: server.token([], "viewer") });
  assert.deepEqual(await own.json(), { by_device_type: [{ device_type: "camera", devices: 1, versions: [{ version: "c1", devices: 1 }], others: 0 }], by_group: [] });

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Versions", exact: true }).click();
  const board = page.locator('tr[data-device-type="board"]');
  await board.waitFor();
  assert.match(await board.innerText(), /board\s+4\s+v2 4/);
  assert.match(await page.locator('tr[data-device-type="camera"]').innerText(), /camera\s+1\s+c1 1/);
  assert.match(await page.locator('tr[data-group="1"]').innerText(), /bench boards\s+4\s+v2 4/);
  assert.equal(await board.locator('.state-seg[data-version="v2"]').getAttribute("style").then((s) => /width: 100%/.test(s ?? "")), true);
  admin.clean([SIGNED_OUT]);

  for (const width of WIDTHS) {
    const tab = await openTab(browser, server.url, { width, height: 800 });
    try {
      await signIn(tab.page, "admin", adminPassword(server.dataDir));
      await tab.page.goto("/#/versions");
      await tab.page.locator('tr[data-group="1"]').waitFor();
      assert.ok(await tab.page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), `nothing wider than ${width} px`);
      await tab.shot(`versions-${width}`, true);
      tab.clean([SIGNED_OUT]);
    } finally {
      await tab.close();
    }
  }
});

test("a long install output unfolded in the device table wraps inside its cell: the table keeps its width and its last column", async () => {
  // A board whose install fails with long lines: one without a blank, one of words.
  const long = `${"x".repeat(3000)}\n${"error: slot B is read-only ".repeat(80)}`;
  const { agent, id } = await (async () => {
    const agent = startAgent(server, { name: "flaky-1", device_type: "board", software_version: "v2", install_command: ["sh", "-c", 'printf "%s" "$1"; exit 3', "install", long], update_check_interval: 3600 }, { clock: server.clock });
    agents.push(agent);
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    return { agent, id };
  })();
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v3", devtype: "board", file: Buffer.from("v3 image") });
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "flaky boards" } })).body.id;
  await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] });
  await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] });
  const created = (await server.call("POST", "/api/v2/deployments", { group, version: "v3", retries: 0 })).body;
  await agent.checkNow();

  for (const width of [1366, 800]) {
    const tab = await openTab(browser, server.url, { width, height: 900 });
    const { page } = tab;
    try {
      await signIn(page, "admin", adminPassword(server.dataDir));
      await page.goto(`/#/deployments/${created.id}`);
      const row = page.locator(`tr[data-device="${id}"][data-state="failed"]`);
      await row.waitFor();
      const table = page.locator("section.card", { hasText: "Devices in this deployment" }).locator(".table-wrap");
      const before = await table.evaluate((el) => ({ width: el.clientWidth, scroll: el.scrollWidth }));
      await row.getByText("output").click();
      await row.locator("pre").waitFor();
      const after = await table.evaluate((el) => ({ width: el.clientWidth, scroll: el.scrollWidth, last: el.querySelector("tbody tr td:last-child:not([style*='none'])")?.getBoundingClientRect().right ?? 0, right: el.getBoundingClientRect().right }));
      assert.equal(after.width, before.width, "the table is as wide as before");
      assert.ok(after.scroll <= after.width, `nothing beyond the table's box (${after.scroll} > ${after.width})`);
      // The last column shown (Updated; Reason at 800 px) ends inside the box.
      const lastShown = await row.evaluate((tr) => Math.max(...[...tr.querySelectorAll("td")].filter((td) => getComputedStyle(td).display !== "none").map((td) => td.getBoundingClientRect().right)));
      assert.ok(lastShown <= after.right + 1, `the last column ends at ${lastShown}, the box at ${after.right}`);
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), `the page is no wider than ${width} px`);
      await tab.shot(`deployment-output-${width}`, true);
      tab.clean([SIGNED_OUT]);
    } finally {
      await tab.close();
    }
  }
});
