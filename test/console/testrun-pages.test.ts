/**
 * The test-run pages (issue 12) in a real browser, against a real gateway and a second labgate
 * started as a lab node: upload a sample config (with a broken one beside it), start it with a
 * suite and an override, watch its status change live, read the report and preview artifacts,
 * repeat with a pattern, abort a long run, run on the node and on the gateway at once, a report of
 * 10,000 cases, and a read-only account. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { uploadConfig } from "../testrun/run-helpers.ts";
import { openTab, SIGNED_OUT, signedInAdmin, signIn, type Tab } from "./browser.ts";

const SAMPLE = join(process.cwd(), "assets", "testrun", "samples", "suites.yml");
/** 10,000 JUnit cases, every 500th failing with a two-line message. */
const BIG = String.raw`tests:
  big:
  - junit:
      name: big
      command:
        - sh
        - -c
        - |
          awk 'BEGIN {
            print "<testsuites><testsuite name=\"big\">"
            for (i = 0; i < 10000; i++) {
              if (i % 500 == 7) printf "<testcase classname=\"big\" name=\"case%05d\"><failure message=\"boom %d\">first line&#10;second line</failure></testcase>\n", i, i
              else printf "<testcase classname=\"big\" name=\"case%05d\" time=\"0.001\"/>\n", i
            }
            print "</testsuite></testsuites>"
          }' > junit.xml
      report: junit.xml
`;

let browser: Browser;
let admin: Tab;

after(async () => {
  await browser?.close();
});
const node = useTestServer();
const gateway = useTestServer(
  async () => {
    await node.started;
    return { test_server: { nodes: { node1: { url: node.url, token: node.adminToken } } } as never };
  },
  async (gateway) => {
    ({ browser, admin } = await signedInAdmin(gateway));
  },
);

/** The trigger dialog first shows the first config by name, which does not load (its include is missing). */
const FIRST_CONFIG = /^422 GET \/api\/v1\/configs\/needs-missing\.yml\/(test-suites|override-hints)$/;

const nav = (page: Page, name: string) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true }).click();
const status = (page: Page, value: string) => page.locator(`.page-header [data-status="${value}"]`);

/** The run page's id from the URL (`#/runs/<id>`). */
const runIdOf = (page: Page) => decodeURIComponent(new URL(page.url()).hash.replace(/^#\/runs\//, "").replace(/\?.*$/, ""));

test("Configs: several files at once, copied to a node; a broken one is shown with its line; the view shows suites, includes and hints", async () => {
  const { page } = admin;
  await nav(page, "Configs");
  await page.locator('input[name="configs"]').setInputFiles([{ name: "suites.yml", mimeType: "application/yaml", buffer: readFileSync(SAMPLE) }, { name: "broken.yml", mimeType: "application/yaml", buffer: Buffer.from("tests:\n  g:\n  - exec: {command: a: b}\n  - sleep:\n") }]);
  await page.getByRole("checkbox", { name: /node1/ }).check();
  await page.getByRole("button", { name: "Upload" }).click();
  const ok = page.locator('[data-upload="suites.yml"]');
  await ok.getByText("copied to node1").waitFor();
  const broken = page.locator('[data-upload="broken.yml"]');
  await broken.getByRole("alert").waitFor();
  assert.match(await broken.innerText(), /not stored\. invalid YAML: .*\(line 3\)/);
  assert.equal(await broken.locator(".y-mark .y-no").innerText(), "3", "the line is marked");
  await page.locator('tr[data-config="suites.yml"]').waitFor();
  assert.equal(await page.locator('tr[data-config="broken.yml"]').count(), 0);
  assert.equal((await node.request("/api/v1/configs/suites.yml", { token: node.adminToken })).status, 200, "the node has it");
  await admin.shot("testrun-configs");

  await page.locator('tr[data-config="suites.yml"]').getByRole("link", { name: "suites.yml" }).click();
  await page.getByRole("heading", { name: "Test suites" }).waitFor();
  await page.locator(".plain-list").getByText("quick", { exact: true }).waitFor();
  await page.getByText("tests.checks.0.exec.command").waitFor();
  // Highlighted keys (more than 10 of them; the highlighting may come after the text).
  await page.locator("pre.yaml .y-key").nth(10).waitFor();
  await admin.shot("testrun-config-view");

  // A config whose include does not exist: the problem, with a link to the line.
  await uploadConfig(gateway, "needs-missing.yml", "# uses a file that is not there\nincludes:\n  - suites.yml\n  - missing.yml\n");
  await page.goto("/#/configs/needs-missing.yml");
  const problem = page.locator("[data-problem]");
  await problem.waitFor();
  assert.match(await problem.innerText(), /included config 'missing\.yml' not found/);
  assert.equal(await page.locator("pre.yaml .y-mark .y-no").innerText(), "4");
  admin.clean([SIGNED_OUT, /^400 POST \/api\/v1\/configs$/, /^422 GET \/api\/v1\/configs\/needs-missing\.yml\/test-suites$/]);
});

/** Opens Test runs' start dialog with `config` and its `suite` chosen. */
async function openStartDialog(page: Page, config: string, suite: string) {
  await nav(page, "Test runs");
  await page.getByRole("button", { name: "Start a run…" }).click();
  const dialog = page.getByRole("dialog", { name: "Start a test run" });
  await dialog.locator('select[name="config_name"]').selectOption(config);
  await dialog.locator('select[name="test_suite_name"] option', { hasText: suite }).waitFor({ state: "attached" });
  await dialog.locator('select[name="test_suite_name"]').selectOption(suite);
  return dialog;
}

let firstRun = "";

test("Test runs: start with a suite and an override; the status changes live; the report puts failures first; artifacts preview", async () => {
  const { page } = admin;
  const dialog = await openStartDialog(page, "suites.yml", "quick");
  await dialog.getByRole("button", { name: "+ Override" }).click();
  assert.equal(await dialog.getByLabel("Override key").inputValue(), "tests.checks.0.exec.command", "the first hint is offered");
  await dialog.getByLabel("Override value").fill("echo overridden > greeting.txt; sleep 1; exit 3");
  await admin.shot("testrun-trigger-dialog");
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 1));
  await dialog.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);
  firstRun = runIdOf(page);
  // pending/running first, then failed: seen without a reload.
  await status(page, "running").or(status(page, "pending")).waitFor();
  await status(page, "failed").waitFor({ timeout: 15_000 });
  assert.equal(await page.evaluate(() => (window as unknown as { marker?: number }).marker), 1, "no reload");

  const counts = page.getByLabel("Report counts");
  await counts.waitFor();
  assert.match(await counts.innerText(), /4\s*cases[\s\S]*3\s*passed[\s\S]*1\s*failed/);
  const first = page.locator("table.report tbody tr").first();
  assert.match(await first.innerText(), /failed[\s\S]*greeting[\s\S]*exit status 3/, "failures first");
  await page.getByLabel("Filter cases").fill("kernel");
  await page.waitForFunction(() => document.querySelectorAll("table.report tbody tr").length === 2);
  await page.getByLabel("Filter cases").fill("");

  const tree = page.locator(".artifact-tree");
  await tree.getByText("plots/").waitFor();
  await page.locator('[data-artifact="greeting.txt"]').getByRole("button", { name: "Preview" }).click();
  await page.locator(".preview-text").getByText("overridden").waitFor();
  // An SVG is a document that may hold script: previewed as its text, never rendered (issue 24).
  await page.locator('[data-artifact="plots/chart.svg"]').getByRole("button", { name: "Preview" }).click();
  await page.locator(".preview-text").getByText("<svg").waitFor();
  assert.equal(await page.locator("img.preview-image").count(), 0);
  await page.locator('[data-artifact="plots/chart.png"]').getByRole("button", { name: "Preview" }).click();
  await page.locator("img.preview-image").waitFor();
  await page.waitForFunction(() => (document.querySelector("img.preview-image") as HTMLImageElement | null)?.naturalWidth === 120);
  await admin.shot("testrun-run");
  admin.clean([FIRST_CONFIG]);
});

test("repeat with a pattern: a bad pattern is explained in place, a good one runs only those cases", async () => {
  const { page } = admin;
  await page.getByRole("button", { name: "Repeat…" }).click();
  const dialog = page.getByRole("dialog", { name: /^Repeat/ });
  await dialog.getByText("Like pytest's").waitFor();
  await dialog.locator('input[name="pattern"]').fill("test_config1 and");
  await dialog.getByRole("button", { name: "Repeat" }).click();
  await dialog.getByRole("alert").filter({ hasText: "invalid pattern" }).waitFor();
  await admin.shot("testrun-repeat-error");
  await dialog.locator('input[name="pattern"]').fill("test_config1");
  await dialog.getByRole("button", { name: "Repeat" }).click();
  await page.waitForURL((url) => /#\/runs\/[0-9a-f-]{36}$/.test(url.hash) && !url.hash.includes(firstRun));
  await status(page, "finished").waitFor({ timeout: 15_000 });
  await page.getByLabel("Report counts").waitFor();
  assert.deepEqual(await page.locator("table.report tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-case"))), ["exit_code[test_config1]"]);
  assert.match(await page.locator(".run-props").innerText(), /repeats[\s\S]*-k test_config1/);
  admin.clean([/^400 POST \/api\/v1\/test-runs\/[0-9a-f-]+\/repeat$/]);
});

test("abort a long run from its page; the list shows it aborted live, filters by status, and deletes", async () => {
  const { page } = admin;
  const dialog = await openStartDialog(page, "suites.yml", "full");
  await dialog.locator("summary").filter({ hasText: "Free YAML" }).click();
  await dialog.locator('textarea[name="overrides"]').fill("tests.soak.0.sleep.seconds: 120");
  await dialog.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);
  const id = runIdOf(page);
  await status(page, "running").waitFor();
  await page.getByRole("button", { name: "Abort" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Abort run" }).click();
  await status(page, "aborted").waitFor({ timeout: 15_000 });
  await page.getByText("aborted by user", { exact: false }).or(page.getByLabel("Report counts")).first().waitFor();

  await nav(page, "Test runs");
  const row = page.locator(`tr[data-run="${id}"]`);
  await row.locator('[data-status="aborted"]').waitFor();
  await page.getByLabel("Filter by status").selectOption("aborted");
  await page.waitForFunction(() => [...document.querySelectorAll("tr[data-run] [data-status]")].every((b) => b.getAttribute("data-status") === "aborted"));
  await row.waitFor();
  await admin.shot("testrun-runs");
  await row.getByRole("button", { name: "Delete" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete run" }).click();
  await row.waitFor({ state: "detached" });
  assert.equal((await gateway.request(`/api/v1/test-runs/${id}`, { token: gateway.adminToken })).status, 404);
  admin.clean([FIRST_CONFIG]);
});

test("a run on the gateway and on a second labgate node at once: side by side, the node's report and artifacts through the gateway", async () => {
  const { page } = admin;
  await nav(page, "Nodes");
  const nodeRow = page.locator('tr[data-node="node1"]');
  await nodeRow.getByText("reachable").waitFor();
  assert.match(await nodeRow.innerText(), new RegExp(node.server.ctx.version.replace(/\./g, "\\.")));
  await admin.shot("testrun-nodes");

  const dialog = await openStartDialog(page, "suites.yml", "quick");
  await dialog.getByLabel("On several nodes at once").check();
  await dialog.getByRole("group", { name: "Nodes" }).getByRole("checkbox", { name: "node1" }).check();
  await dialog.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/triggers\//);
  await page.locator(".page-header [data-status=finished]").waitFor({ timeout: 20_000 });
  const columns = page.locator(".side-by-side > .card");
  assert.equal(await columns.count(), 2);
  await columns.filter({ hasText: "node1" }).getByLabel("Report counts").waitFor();
  await columns.filter({ hasText: "this gateway" }).getByLabel("Report counts").waitFor();
  await admin.shot("testrun-trigger");

  await columns.filter({ hasText: "node1" }).getByRole("link", { name: "Open the run" }).click();
  await page.getByText("on node node1").waitFor();
  await page.getByLabel("Report counts").waitFor();
  assert.match(await page.getByLabel("Report counts").innerText(), /4\s*cases[\s\S]*4\s*passed/);
  await page.locator('[data-artifact="greeting.txt"]').getByRole("button", { name: "Preview" }).click();
  await page.locator(".preview-text").getByText("hello from labgate").waitFor();
  assert.equal(await page.getByRole("button", { name: "Abort" }).or(page.getByRole("button", { name: "Delete" })).count(), 0, "a node's run is read-only here");
  admin.clean([FIRST_CONFIG]);
});

test("a report of 10,000 cases (and the framework's own exit status): counts, failures first, filter and paging stay quick", async () => {
  const { page } = admin;
  await uploadConfig(gateway, "big.yml", BIG);
  const res = await gateway.request("/api/v1/test-runs", { method: "POST", json: { config_name: "big.yml" }, token: gateway.adminToken });
  const run = (await res.json()) as { id: string };
  await page.goto(`/#/runs/${run.id}`);
  await status(page, "failed").waitFor({ timeout: 60_000 });
  const counts = page.getByLabel("Report counts");
  await counts.waitFor({ timeout: 30_000 });
  assert.match(await counts.innerText(), /10,001\s*cases[\s\S]*9,981\s*passed[\s\S]*20\s*failed/);
  assert.equal(await page.locator("table.report tbody tr").count(), 100, "one page of rows in the document");
  assert.match(await page.locator("table.report tbody tr").first().innerText(), /failed[\s\S]*case00007/);
  const toggle = page.locator("table.report tbody tr").first().locator(".message-toggle");
  if ((await toggle.count()) > 0) {
    await toggle.click();
    await page.locator(".message-full").first().waitFor();
  }
  await page.getByLabel("Filter cases").fill("case0999");
  await page.waitForFunction(() => document.querySelectorAll("table.report tbody tr").length === 10);
  await page.getByLabel("Filter cases").fill("");
  await page.getByRole("navigation", { name: "Pages" }).getByRole("button", { name: "Next ›" }).click();
  await page.getByRole("navigation", { name: "Pages" }).getByText("101–200 of 10,001").waitFor();
  await admin.shot("testrun-big-report");
  admin.clean();
});

test("a read-only account sees runs and configs without upload, start, abort, repeat or delete; the API refuses it", async () => {
  const res = await gateway.request("/api/v1/users", { method: "POST", json: { name: "viewer", password: "viewer-password-1", scopes: ["svc_tests_ro"] }, token: gateway.adminToken });
  assert.equal(res.status, 201, await res.text());
  const tab = await openTab(browser, gateway.url);
  try {
    const { page } = tab;
    await signIn(page, "viewer", "viewer-password-1");
    // An account with only test-run scopes opens on Test runs, not on an empty Devices page.
    await page.waitForURL(/#\/runs$/);
    await nav(page, "Test runs");
    await page.locator("tr[data-run]").first().waitFor();
    assert.equal(await page.getByRole("button", { name: "Start a run…" }).count(), 0);
    assert.equal(await page.locator("tr[data-run] button").count(), 0, "no abort, repeat or delete");
    await tab.shot("testrun-runs-readonly");
    await page.locator("tr[data-run] a").first().click();
    await page.locator(".page-header [data-status]").waitFor();
    assert.equal(await page.locator(".page-header button").count(), 0);
    await nav(page, "Configs");
    await page.locator("tr[data-config]").first().waitFor();
    assert.equal(await page.locator('input[name="configs"]').count(), 0, "no upload");
    assert.equal(await page.locator("tr[data-config] button").count(), 0);
    // A table sorts by a column when its header is clicked: ascending, descending, then as listed.
    const names = () => page.locator("tr[data-config]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-config")!));
    const listed = await names();
    assert.ok(listed.length > 1, "several configs to sort");
    const byName = [...listed].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
    const header = page.getByRole("columnheader", { name: "Name" });
    await header.getByRole("button").click();
    assert.equal(await header.getAttribute("aria-sort"), "ascending");
    assert.deepEqual(await names(), byName);
    await header.getByRole("button").click();
    assert.equal(await header.getAttribute("aria-sort"), "descending");
    assert.deepEqual(await names(), [...byName].reverse());
    await header.getByRole("button").click();
    assert.equal(await header.getAttribute("aria-sort"), "none");
    assert.deepEqual(await names(), listed);
    const refused = await page.evaluate(async () => {
      const post = await fetch("/api/v1/test-runs", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ config_name: "suites.yml" }) });
      const abort = await fetch("/api/v1/test-runs/x", { method: "DELETE" });
      return [post.status, abort.status];
    });
    assert.deepEqual(refused, [403, 403]);
    // At phone width too: the list without its narrow-hidden columns, the menu behind its button.
    const phone = await openTab(browser, gateway.url, { width: 390, height: 800 });
    await phone.context.addCookies(await tab.context.cookies());
    await phone.page.goto("/#/runs");
    await phone.page.locator("tr[data-run]").first().waitFor();
    await phone.shot("testrun-runs-390");
    await phone.close();
    tab.clean([SIGNED_OUT, /^403 (POST|DELETE) \/api\/v1\/test-runs/, /^(4\d\d|5\d\d) GET \/api\/v2\/devices/]);
  } finally {
    await tab.close();
  }
});
