/**
 * Signed packages and deltas in the console (issue 45): the package list and a package's page say
 * whether a package is signed and by which key; the New deployment dialog warns, before anything
 * starts, that the group's devices require signatures and would refuse an unsigned package; a
 * package's page makes a delta and shows its progress.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { makeArtifact, makeKey } from "../update/helpers/mender.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

const ec = makeKey("ec");
let browser: Browser;
let admin: Tab;
const agents: Array<{ stop(): Promise<void> }> = [];
after(async () => {
  await browser?.close();
  for (const agent of agents) await agent.stop();
});
const server = useTestServer({ update_server: { signing: { keys: [ec.pub], required: false } } }, async (server) => {
  ({ browser, admin } = await signedInAdmin(server));
});

test("the package list and page show each package's signature; New deployment warns of devices that would refuse an unsigned one", async () => {
  const payload = Buffer.alloc(10_000, "img ");
  const signed = await uploadOk(server, { token: server.adminToken, version: "s1", devtype: "strict", file: await makeArtifact({ name: "s1", deviceType: "strict", payload, key: ec }) });
  const unsigned = await uploadOk(server, { token: server.adminToken, version: "u1", devtype: "strict", file: await makeArtifact({ name: "u1", deviceType: "strict", payload }) });
  const agent = startAgent(server, { device_type: "strict", software_version: "v0", verify_keys: [ec.pub], update_check_interval: 3600 });
  agents.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "strict boards" } })).body.id;
  await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [signed.id, unsigned.id] });
  await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [id], remove: [] });

  const { page } = admin;
  await page.goto("/#/packages");
  await page.locator(`tr[data-package="${signed.id}"]`, { hasText: `signed ${ec.fingerprint.slice(0, 12)}` }).waitFor();
  await page.locator(`tr[data-package="${unsigned.id}"]`, { hasText: "unsigned" }).waitFor();
  await page.goto(`/#/packages/${signed.id}`);
  await page.locator("[data-signature]", { hasText: `signed by ${ec.fingerprint}` }).waitFor();
  await page.goto(`/#/packages/${unsigned.id}`);
  assert.match(await page.locator("[data-signature]").innerText(), /unsigned: unsigned: the artifact has no manifest\.sig/);

  await page.goto("/#/deployments");
  await page.getByRole("button", { name: "New deployment" }).click();
  const dialog = page.getByRole("dialog");
  await dialog.locator('select[name="group"]').selectOption({ label: "strict boards (1 devices, policy no_update,)" });
  await dialog.locator('select[name="version"]').selectOption("u1");
  await dialog.locator('[data-preflight-warning="unsigned_package"]', { hasText: "require signed updates" }).waitFor();
  await dialog.locator('select[name="version"]').selectOption("s1");
  await dialog.locator('[data-preflight-warning]').waitFor({ state: "detached" });
  await admin.shot("signing-new-deployment");
  admin.clean([SIGNED_OUT]);
});

test("a package's page makes a delta from another version and links the delta package once made", async () => {
  const v1 = Buffer.alloc(256 * 1024, "version one ");
  const v2 = Buffer.concat([v1.subarray(0, 128 * 1024), Buffer.from("changed"), v1.subarray(128 * 1024)]);
  const base = await uploadOk(server, { token: server.adminToken, version: "b1", devtype: "delta-board", file: v1 });
  const target = await uploadOk(server, { token: server.adminToken, version: "b2", devtype: "delta-board", file: v2 });
  const { page } = admin;
  await page.goto(`/#/packages/${target.id}`);
  await page.getByRole("combobox", { name: "Delta from" }).selectOption(String(base.id));
  await page.getByRole("button", { name: "Make a delta" }).click();
  await page.locator('[data-delta-job="done"] a', { hasText: "package #" }).waitFor();
  const made = (await server.call<Array<{ state: string; package?: number }>>("GET", "/api/v1/packages/deltas")).body.find((j) => j.state === "done");
  assert.ok(made?.package);
  await admin.shot("package-delta");
  admin.clean([SIGNED_OUT]);
});
