/**
 * The Cluster page in a real browser: two nodes on one throwaway PostgreSQL, each node's state,
 * devices and jobs; a node that stops shows so. Screenshot in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { cpSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { KEYS_DIR } from "../../src/auth/keys.ts";
import { startPostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir } from "../helpers/server.ts";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { signedInAdmin } from "./browser.ts";

const cleanup: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => {});
});

test("the Cluster page lists every node on the database with its state, devices and jobs", async () => {
  const postgres = await startPostgres();
  cleanup.push(() => postgres.stop());
  const url = await postgres.createDatabase("console");
  const a = await startTestServer({ database: { url }, cluster: { node_name: "rack-1", advertise_url: "http://10.0.0.1:5000" } });
  cleanup.push(() => a.close());
  const bDir = tempDir();
  cpSync(join(a.dataDir, KEYS_DIR), join(bDir, KEYS_DIR), { recursive: true });
  const b = await startTestServer({ database: { url }, cluster: { node_name: "rack-2", advertise_url: "http://10.0.0.2:5000" } }, bDir);
  cleanup.push(() => b.close());
  const { token } = await registerDevice(b);
  const socket = await openDeviceSocket(b.url, token);
  cleanup.push(async () => socket.ws.close());

  const { browser, admin } = await signedInAdmin(a);
  cleanup.push(() => browser.close());
  const { page } = admin;
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Cluster", exact: true }).click();
  const table = page.getByRole("table", { name: "Cluster nodes" });
  await table.waitFor();
  // The device's socket is recorded by node rack-2 shortly after it opened.
  await page.waitForFunction(async () => {
    const row = document.querySelector('tr[data-node="rack-2"]');
    if (row?.textContent?.includes("1")) return true;
    document.querySelector<HTMLButtonElement>("main button")?.click();
    return false;
  }, undefined, { polling: 500, timeout: 10_000 });
  const rows = await table.locator("tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent)));
  assert.deepEqual(rows, [
    ["rack-1", "up", "0", "deployments, audit_retention, progress_expiry, test_runs, node_sweep", "http://10.0.0.1:5000"],
    ["rack-2", "up", "1", "none", "http://10.0.0.2:5000"],
  ]);
  await admin.shot("cluster");

  await b.close();
  await page.getByRole("button", { name: "Read again" }).click();
  await page.locator('tr[data-node="rack-2"][data-state="stopped"]').waitFor();
});
