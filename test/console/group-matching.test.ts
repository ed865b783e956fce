/**
 * Acting on many (issue 47.2): a group's page adds every device a filter matches (200 of them) in
 * one action, through POST /api/v2/groups/{id}/devices/matching, which is bounded and checks what
 * adding each device checks. Screenshots at 1366, 800 and 390 px in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { seedDevices } from "../update/helpers/devices.ts";
import { closeMessages, SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
let group = 0;
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async (server) => {
  const seeded = await seedDevices(server, 230);
  await server.db.write(async (tx) => {
    for (const [i, d] of seeded.entries()) await tx.run("UPDATE devices SET name = ? WHERE id = ?", [i < 200 ? `rack7-${i}` : `spare-${i}`, d.id]);
  });
  group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "rack 7" } })).body.id;
  ({ browser, admin } = await signedInAdmin(server));
});

test("200 devices added to a group by a filter in one action", async () => {
  const { page } = admin;
  for (const [width, height] of [[1366, 900], [800, 900], [390, 844]] as const) {
    await page.setViewportSize({ width, height });
    await page.goto(`/#/groups/${group}`);
    await page.reload();
    await page.getByLabel("Find a device to add").fill("rack7");
    await page.getByRole("button", { name: "Add all 200 matching" }).scrollIntoViewIfNeeded();
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), `no horizontal overflow at ${width} px`);
    await admin.shot(`group-matching-${width}`);
  }
  await page.setViewportSize({ width: 1366, height: 900 });
  await page.getByRole("button", { name: "Add all 200 matching" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Add all" }).click();
  await page.getByRole("heading", { name: "Devices (200)" }).waitFor();
  const members = (await server.call("GET", `/api/v2/groups/${group}`)).body.devices as number[];
  assert.equal(members.length, 200);
  await closeMessages(page);
  await admin.shot("group-matching-done");
  admin.clean([SIGNED_OUT]);
});

test("the matching API: members stay, a filter wider than 1000 or empty is a 400, an unknown group a 404; nothing changes on a refusal", async () => {
  const again = await server.call("POST", `/api/v2/groups/${group}/devices/matching`, { q: "rack7-1" });
  assert.equal(again.status, 200, JSON.stringify(again.body));
  assert.deepEqual(again.body, { added: 0 }, "already members");
  const spares = await server.call("POST", `/api/v2/groups/${group}/devices/matching`, { q: "spare" });
  assert.deepEqual(spares.body, { added: 30 });
  for (const body of [{}, { q: "" }, { q: "   " }, { q: 5 }, { q: "x".repeat(257) }, { q: "rack", extra: 1 }]) {
    const res = await server.call("POST", `/api/v2/groups/${group}/devices/matching`, body);
    assert.equal(res.status, 400, JSON.stringify(body));
  }
  assert.equal((await server.call("POST", `/api/v2/groups/999/devices/matching`, { q: "rack" })).status, 404);
  // A user adds only what they may read, and needs update on each (else 403, nothing added).
  const lab = await seedDevices(server, 5);
  await server.db.write(async (tx) => {
    for (const [i, d] of lab.entries()) await tx.run("UPDATE devices SET name = ? WHERE id = ?", [`lab-x-${i}`, d.id]);
  });
  const mine = (await server.call("POST", "/api/v2/groups", { metadata: { name: "carol's" }, priority: 40 })).body.id;
  const grant = async (resource: string, id: number, permission: string) =>
    assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "carol", resource, resource_id: id, permission })).status, 200);
  await grant("group", mine, "update");
  for (const d of lab.slice(0, 3)) await grant("device", d.id, "read");
  for (const d of lab.slice(0, 2)) await grant("device", d.id, "update");
  const carol = server.token([], "carol");
  const asCarol = () => server.request(`/api/v2/groups/${mine}/devices/matching`, { method: "POST", token: carol, json: { q: "lab-x" } });
  assert.equal((await asCarol()).status, 403);
  assert.deepEqual((await server.call("GET", `/api/v2/groups/${mine}`)).body.devices, []);
  await grant("device", lab[2]!.id, "update");
  const added = await asCarol();
  assert.equal(added.status, 200);
  assert.deepEqual(await added.json(), { added: 3 }, "the three carol may read, not the two she may not");
  assert.equal((await server.request(`/api/v2/groups/${group}/devices/matching`, { method: "POST", token: carol, json: { q: "lab-x" } })).status, 403, "no update on that group");

  await seedDevices(server, 1001);
  const other = (await server.call("POST", "/api/v2/groups", { metadata: { name: "wide" }, priority: 30 })).body.id;
  const wide = await server.call("POST", `/api/v2/groups/${other}/devices/matching`, { q: ":" });
  assert.equal(wide.status, 400);
  assert.match(wide.body.error, /devices match: at most 1000 are added at once/);
  assert.deepEqual((await server.call("GET", `/api/v2/groups/${other}`)).body.devices, []);
});
