/**
 * Reports that name their checks (issue 47.1): a run of three named entries on two boards shows
 * each entry's `name:`, the board, and a failure's output, in the console (1366, 800 and 390 px)
 * and in the JSON form; the CSV keeps its six columns; the config's history names its tests too.
 * A run on the gateway keeps the same details (name, output; no board). Screenshots in
 * .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import type { Agent } from "../../src/agent/agent.ts";
import { useTestServer } from "../helpers/server.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
const agents: Agent[] = [];

const entry = (name: string, script: string) => ["  - exec:", `      name: ${name}`, `      command: [sh, -c, '${script}']`];
const BOARD = [
  "tests:",
  "  bench:",
  "    machines: [tag:bench]",
  "    tests:",
  ...entry("Power rail", "echo 3.3V").map((l) => `  ${l}`),
  ...entry("Sensor bus", "echo probing 0x48; echo i2c: no ACK at 0x48 >&2; exit 1").map((l) => `  ${l}`),
  ...entry("Uptime", "cat /proc/uptime").map((l) => `  ${l}`),
  "",
].join("\n");
const LOCAL = ["tests:", "  here:", ...entry("Disk check", "echo checking; echo disk full >&2; exit 2"), ""].join("\n");

after(async () => {
  await browser?.close();
  for (const agent of agents) await agent.stop();
});
const gateway = useTestServer(FAST_SERVER, async (gateway) => {
  for (const name of ["board-a", "board-b"]) {
    const agent = startAgent(gateway, { name, tests: { enabled: true } } as AgentOptions);
    agents.push(agent);
    const id = await approveAgent(gateway, agent);
    await untilConnected(gateway, id);
    await gateway.call("POST", `/api/v2/devices/${id}/tag/bench`);
  }
  await uploadConfig(gateway, "bench.yml", BOARD);
  await uploadConfig(gateway, "local.yml", LOCAL);
  ({ browser, admin } = await signedInAdmin(gateway));
});

const SIZES = [
  { width: 1366, height: 900 },
  { width: 800, height: 900 },
  { width: 390, height: 844 },
];

const noOverflow = (page: Page) => page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);

test("a run of three named entries on two boards: the JSON form and the console name each entry, its board and a failure's output; the CSV keeps its six columns", async () => {
  const run = await trigger(gateway, { config_name: "bench.yml" });
  const done = await waitRun(gateway, run.id, undefined, 30_000);
  assert.equal(done.status, "failed");

  const rows = await reportRows(gateway, run.id);
  assert.equal(rows.length, 6);
  assert.deepEqual([...new Set(rows.map((r) => r.name))].sort(), ["Power rail", "Sensor bus", "Uptime"]);
  assert.deepEqual([...new Set(rows.map((r) => r.board))].sort(), ["board-a", "board-b"]);
  for (const row of rows) assert.equal(row.board, row["device name"]);
  const failed = rows.filter((r) => r.status === "failed");
  assert.equal(failed.length, 2);
  for (const row of failed) {
    assert.equal(row.name, "Sensor bus");
    assert.equal(row.output, "probing 0x48\ni2c: no ACK at 0x48");
    assert.match(row.message, /exit status 1, expected 0/);
  }
  for (const row of rows.filter((r) => r.status === "passed")) assert.equal(row.output, undefined, "a passed case has no output tail");

  const csv = await gateway.request(`/api/v1/test-runs/${run.id}/report`, { token: gateway.adminToken });
  const text = await csv.text();
  assert.equal(text.split("\r\n")[0], "device name,test name,module,duration,message,status");
  assert.doesNotMatch(text, /Sensor bus|no ACK/, "the CSV has the reference's columns only");

  const { page } = admin;
  for (const size of SIZES) {
    await page.setViewportSize(size);
    await page.goto(`/#/runs/${run.id}`);
    await page.reload();
    const report = page.getByRole("table", { name: "Report" });
    await report.waitFor();
    const first = report.locator("tbody tr").first();
    assert.equal(await first.getAttribute("class"), "row-failed");
    assert.match(await first.innerText(), /Sensor bus/);
    assert.match(await first.innerText(), /exit_code\[test_config1\]/);
    await first.getByRole("button", { name: "▸ output" }).click();
    assert.equal(await first.getByLabel("Output").innerText(), "probing 0x48\ni2c: no ACK at 0x48");
    assert.deepEqual(await report.locator("tbody tr .check-name").allInnerTexts().then((names) => [...new Set(names)].sort()), ["Power rail", "Sensor bus", "Uptime"]);
    if (size.width > 800) {
      const heads = await report.locator("thead th").allInnerTexts();
      assert.ok(heads.includes("board"), heads.join("|"));
      assert.ok(!heads.includes("module"), "the module column repeats the test name: it is the check's tooltip");
    }
    assert.ok(await noOverflow(page), `no horizontal overflow at ${size.width} px`);
    await closeMessages(page);
    await report.scrollIntoViewIfNeeded();
    await admin.shot(`named-checks-report-${size.width}`);
  }
  await page.setViewportSize(SIZES[0]!);
  // The runs list: the run's counts over its boards and how long it took.
  await page.goto("/#/runs");
  const listed = page.locator(`tr[data-run="${run.id}"]`);
  assert.equal(await listed.locator("[data-counts]").innerText(), "4 passed · 2 failed");
  assert.match(await listed.innerText(), /took \d+ s/);
  await admin.shot("named-checks-runs-list");
  admin.clean([SIGNED_OUT]);
});

test("the config's history matrix names each test by its entry", async () => {
  const { page } = admin;
  await page.goto("/#/configs/bench.yml");
  const matrix = page.getByRole("table", { name: "Results per device" });
  await matrix.waitFor();
  const row = matrix.locator('tr[data-test="exit_code[test_config1]"]');
  assert.equal(await row.locator(".check-name").innerText(), "Sensor bus");
  await matrix.scrollIntoViewIfNeeded();
  await admin.shot("named-checks-history");
  const history = await gateway.call("GET", "/api/v1/configs/bench.yml/history");
  assert.deepEqual([...new Set((history.body.rows as Array<{ name: string }>).map((r) => r.name))].sort(), ["Power rail", "Sensor bus", "Uptime"]);
  admin.clean();
});

test("a run on the gateway: each row names its entry and a failure carries its output tail, no board", async () => {
  const run = await trigger(gateway, { config_name: "local.yml" });
  await waitRun(gateway, run.id);
  const rows = await reportRows(gateway, run.id);
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.name, "Disk check");
  assert.equal(rows[0]!["device name"], "Disk check", "exec's name is its device name on the gateway");
  assert.equal(rows[0]!.output, "checking\ndisk full");
  assert.equal(rows[0]!.board, undefined);
});
