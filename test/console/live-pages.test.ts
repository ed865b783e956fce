/**
 * A page that follows an event stream must never be left showing an old state (the class behind a
 * run page stuck on "running" under load): what changed before its stream opened comes as no
 * event, so the page loads again when the stream opens; and an answer that was under way when an
 * event arrived may be older than the event, so it does not replace the event's state. Both are
 * made to happen here by holding requests in the browser: on the run page (its events carry the
 * whole run; every page follows its stream through the same two hooks, useEventSource and useLoad)
 * and on a device's page (the console's one device stream says who is online).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Browser, Page, Route } from "playwright-core";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { getRun, trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { approvedThenStopped, restartAgent, startAgent, untilConnected } from "../update/helpers/agents.ts";
import type { Agent } from "../../src/agent/agent.ts";
import { adminPassword, openTab, SIGNED_OUT, signedInAdmin, signIn, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
/** A gated run waits until the test creates its gate file here. */
const gates = mkdtempSync(join(tmpdir(), "labgate-gates-"));

const agents: Agent[] = [];

after(async () => {
  for (const agent of agents) await agent.stop();
  await browser?.close();
  rmSync(gates, { recursive: true, force: true });
});
const gateway = useTestServer({}, async (gateway) => {
  ({ browser, admin } = await signedInAdmin(gateway));
});

const status = (page: Page, value: string) => page.locator(`.page-header [data-status="${value}"]`);

/** Starts a run that waits for its gate; `open()` lets it end (failed). */
async function gatedRun(name: string) {
  const gate = join(gates, name);
  await uploadConfig(gateway, `${name}.yml`, `tests:\n  gated:\n  - exec:\n      name: wait\n      command: "while [ ! -e ${gate} ]; do sleep 0.02; done; exit 1"\n`);
  const run = await trigger(gateway, { config_name: `${name}.yml` });
  return { id: run.id, open: () => writeFileSync(gate, "") };
}

test("the run page shows an end that came before its stream opened", async () => {
  const { page } = admin;
  const run = await gatedRun("before-open");
  let streams = 0;
  // The page's first stream is held until the run has ended: its end comes as no event.
  await page.route("**/api/v1/test-runs/stream", async (route: Route) => {
    if (streams++ > 0) return route.continue();
    await waitRun(gateway, run.id);
    await route.continue();
  });
  await page.goto(`/#/runs/${run.id}`);
  await status(page, "running").waitFor();
  await waitFor(() => streams === 1, 10_000, "the held stream");
  run.open();
  await status(page, "failed").waitFor({ timeout: 10_000 });
  await page.unroute("**/api/v1/test-runs/stream");
  admin.clean([SIGNED_OUT]);
});

test("the run page keeps an event's state over an older answer that arrives after it", async () => {
  const { page } = admin;
  const run = await gatedRun("older-answer");
  const path = `/api/v1/test-runs/${run.id}`;
  const held: Array<Promise<void>> = [];
  // Every answer about the run is taken at once (the run is running) and given to the page only
  // once the page shows the end, which then came by event.
  await page.route(`**${path}`, (route: Route) => {
    held.push(
      (async () => {
        const answer = await route.fetch();
        assert.equal(((await answer.json()) as { status: string }).status, "running");
        await status(page, "failed").waitFor({ timeout: 10_000 });
        await route.fulfill({ response: answer });
      })(),
    );
  });
  const streamOpened = page.waitForResponse((res) => res.url().endsWith("/api/v1/test-runs/stream"));
  await page.goto(`/#/runs/${run.id}`);
  await streamOpened;
  // The load at the start and the one when the stream opened are both held.
  await waitFor(() => held.length >= 2, 10_000, "both loads");
  assert.equal((await getRun(gateway, run.id)).status, "running");
  run.open();
  await Promise.all(held);
  // The older answers have been handed over; one frame later the page still shows the end.
  await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
  assert.equal(await status(page, "failed").count(), 1, "the event's state stays");
  assert.equal(await status(page, "running").count(), 0);
  await page.unroute(`**${path}`);
  admin.clean([SIGNED_OUT]);
});

test("a device's page shows it online when it connected before the console's stream opened", async () => {
  const first = startAgent(gateway, { name: "bench-1" });
  const id = await approvedThenStopped(gateway, first);
  const tab = await openTab(browser, gateway.url);
  const { page } = tab;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let streams = 0;
  // The console's device stream, the first, opened at sign-in, is held until the device has connected.
  await page.route("**/api/stream", async (route: Route) => {
    if (streams++ === 0) await released;
    await route.continue();
  });
  await signIn(page, "admin", adminPassword(gateway.dataDir));
  await page.goto(`/#/devices/${id}`);
  const badge = page.locator(".page-header .badge");
  await badge.filter({ hasText: "offline" }).waitFor();
  assert.ok(streams >= 1, "the frame's stream is held (the page's update history opens one of its own)");
  const again = restartAgent(first);
  agents.push(again);
  await untilConnected(gateway, id);
  release();
  await badge.filter({ hasText: "online" }).waitFor({ timeout: 10_000 });
  await tab.close();
  tab.clean([SIGNED_OUT]);
});
