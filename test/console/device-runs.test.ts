/**
 * Runs on managed devices in a real browser (issue 28): "where to run" offers the groups, tags
 * and devices the user may test, the run page shows each device's progress live and aborts them,
 * the report filters by device, and the config page shows the history matrix (devices x tests,
 * newest runs; a newly failing test marked). Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import type { Agent } from "../../src/agent/agent.ts";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { approveAgent, FAST_SERVER, spawnConnectedAgent, startAgent, untilConnected, type AgentOptions } from "../update/helpers/agents.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
const agents: Array<Agent & { dir: string }> = [];
const children: ChildProcess[] = [];

const SLOW = ["tests:", "  board:", "  - exec:", "      name: quick", "      command: [sh, -c, 'echo fine']", "  - exec:", "      name: soak", "      command: [sleep, '60']", ""].join("\n");
const CHECK = (fails: string) => ["tests:", "  board:", "    machines: [tag:bench]", "    tests:", "    - exec:", "        command: [sh, -c, 'test \"$(hostname)\" != " + fails + "']", "    - simple: {}", ""].join("\n");

after(async () => {
  await browser?.close();
  for (const agent of agents) await agent.stop();
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});
const gateway = useTestServer({ ...FAST_SERVER, test_server: { compat_modules: true } }, async (gateway) => {
  for (const name of ["rack-1", "rack-2"]) {
    const agent = startAgent(gateway, { name, tests: { enabled: true } } as AgentOptions);
    agents.push(agent);
    const id = await approveAgent(gateway, agent);
    await untilConnected(gateway, id);
    await gateway.call("POST", `/api/v2/devices/${id}/tag/bench`);
  }
  await uploadConfig(gateway, "board.yml", SLOW);
  ({ browser, admin } = await signedInAdmin(gateway));
});

const nav = (page: Page, name: string) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true }).click();
const status = (page: Page, value: string) => page.locator(`.page-header [data-status="${value}"]`);
const device = (page: Page, name: string) => page.locator(`table.devices tr[data-device="${name}"]`);

test("Start a run on a group made in the console; the run page shows each device live; abort stops them all; the report filters by device", async () => {
  const { page } = admin;
  // The group as the console makes it (its name under svc.group.name), with both boards.
  await nav(page, "Groups");
  await page.locator('input[name="group-name"]').fill("lab");
  await page.getByRole("button", { name: "Create group" }).click();
  await page.getByRole("heading", { name: "lab" }).waitFor();
  for (const name of ["rack-1", "rack-2"]) {
    await page.getByRole("searchbox", { name: "Find a device to add" }).fill(name);
    await page.getByRole("button", { name: `Add ${name}` }).click();
    await page.getByRole("button", { name: `Remove ${name} from the group` }).waitFor();
  }
  const groups = (await gateway.call("GET", "/api/v2/groups")).body as Array<{ metadata: Record<string, unknown> }>;
  assert.deepEqual(groups.map((g) => g.metadata), [{ "svc.group.name": "lab" }]);
  await nav(page, "Test runs");
  await page.getByRole("button", { name: "Start a run…" }).click();
  const dialog = page.getByRole("dialog", { name: "Start a test run" });
  await dialog.locator('select[name="config_name"]').selectOption("board.yml");
  await dialog.getByRole("radio", { name: /On managed devices/ }).check();
  const place = dialog.getByLabel("Group");
  await place.locator("option", { hasText: "lab (2 devices)" }).waitFor({ state: "attached" });
  await dialog.getByLabel("Run on").selectOption("tag");
  await dialog.getByLabel("Tag").locator("option", { hasText: "bench (2 devices)" }).waitFor({ state: "attached" });
  await dialog.getByLabel("Run on").selectOption("group");
  await admin.shot("device-runs-where");
  await dialog.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);

  // Live: both devices pass `quick` and sleep in `soak`.
  for (const name of ["rack-1", "rack-2"]) await device(page, name).locator('[data-status="running"]').waitFor({ timeout: 15_000 });
  await page.waitForFunction(() => [...document.querySelectorAll("table.devices tbody tr")].every((tr) => tr.querySelectorAll("td")[2]?.textContent === "1"), undefined, { timeout: 15_000 });
  assert.match(await page.locator(".run-props").innerText(), /Devices\s*2 devices \(group:lab\)/);
  await admin.shot("device-runs-running");
  await page.getByRole("button", { name: "Abort" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Abort run" }).click();
  await status(page, "aborted").waitFor({ timeout: 20_000 });
  for (const name of ["rack-1", "rack-2"]) await device(page, name).locator('[data-status="aborted"]').waitFor();

  await page.getByLabel("Report counts").waitFor();
  assert.match(await page.getByLabel("Report counts").innerText(), /4\s*cases/);
  await page.getByLabel("Filter by device").selectOption("rack-2");
  await page.waitForFunction(() => document.querySelectorAll("table.report tbody tr").length === 2);
  assert.deepEqual(await page.locator('table.report tbody tr td:nth-child(2)').allInnerTexts(), ["rack-2", "rack-2"]);
  await page.locator(".artifact-tree").or(page.getByText("No files.")).first().waitFor();
  await admin.shot("device-runs-aborted", true);
  admin.clean([SIGNED_OUT]);
});

test("the config page's matrix: devices x tests over the newest runs, a newly failing test marked", async () => {
  const { page } = admin;
  const host = (await import("node:os")).hostname();
  // Twice passing everywhere, then failing (the agents run here, so `hostname` is this host's).
  for (const fails of ["none", "none", host]) {
    await uploadConfig(gateway, "check.yml", CHECK(fails));
    const run = await gateway.call("POST", "/api/v1/test-runs", { config_name: "check.yml" });
    assert.equal(run.status, 200, JSON.stringify(run.body));
    await waitRun(gateway, run.body.id);
  }
  await nav(page, "Configs");
  await page.locator('tr[data-config="check.yml"] a').first().click();
  const matrix = page.getByRole("table", { name: "Results per device" });
  await matrix.waitFor();
  assert.deepEqual(await matrix.locator("thead th").allInnerTexts(), ["Test", "rack-1", "rack-2"]);
  const exit = matrix.locator('tr[data-test="exit_code[test_config0]"]');
  assert.equal(await exit.locator("td.newly-failing").count(), 2);
  assert.deepEqual(await exit.locator('td[data-device="rack-1"] .cell-result').evaluateAll((cells) => cells.map((c) => c.className)), [
    "cell-result result-passed",
    "cell-result result-passed",
    "cell-result result-failed",
  ]);
  await page.getByLabel("only failing or flaky tests").check();
  await page.waitForFunction(() => document.querySelectorAll("table.history tbody tr").length === 2);
  assert.deepEqual(await matrix.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-test"))), ["exit_code[test_config0]", "failure[test_config0]"]);
  await page.getByLabel("only failing or flaky tests").uncheck();
  await closeMessages(page);
  await matrix.scrollIntoViewIfNeeded();
  await admin.shot("device-runs-history");
  admin.clean();
});

/** Processes on this machine whose command line is exactly `argv`. */
const processesRunning = (argv: string[]): number[] =>
  readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8") === `${argv.join("\0")}\0`;
      } catch {
        return false;
      }
    })
    .map(Number);

test("Abort in the console stops a run on a `labgate agent` child process: the run ends aborted, the process it ran is gone, the agent stays", async () => {
  const agent = await spawnConnectedAgent(gateway, ["name: child-1", "tests: {enabled: true, max_duration: 120}"]);
  children.push(agent.child);
  // A command line no other test runs.
  const soak = ["sleep", "61.25"];
  await uploadConfig(gateway, "child.yml", ["tests:", "  board:", "  - exec:", "      name: soak", `      command: [${soak.join(", ")}]`, ""].join("\n"));
  const { page } = admin;
  await nav(page, "Test runs");
  await page.getByRole("button", { name: "Start a run…" }).click();
  const dialog = page.getByRole("dialog", { name: "Start a test run" });
  await dialog.locator('select[name="config_name"]').selectOption("child.yml");
  await dialog.getByRole("radio", { name: /On managed devices/ }).check();
  await dialog.getByLabel("Run on").selectOption("device");
  const place = dialog.getByLabel("Device", { exact: true });
  const option = place.locator("option", { hasText: "child-1" });
  await option.waitFor({ state: "attached" });
  await place.selectOption((await option.getAttribute("value"))!);
  await dialog.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);

  await device(page, "child-1").locator('[data-status="running"]').waitFor({ timeout: 15_000 });
  await waitFor(() => processesRunning(soak).length === 1, 15_000, "the agent's sleep running");
  await admin.shot("device-runs-child-running");
  await page.getByRole("button", { name: "Abort" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Abort run" }).click();
  await status(page, "aborted").waitFor({ timeout: 20_000 });
  await device(page, "child-1").locator('[data-status="aborted"]').waitFor();
  await waitFor(() => processesRunning(soak).length === 0, 15_000, "the agent's sleep gone");
  assert.equal(agent.child.exitCode, null, "the agent itself still runs");
  await admin.shot("device-runs-child-aborted");
  admin.clean([SIGNED_OUT]);
});

