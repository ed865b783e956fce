/**
 * Acting on many (issue 47.2): the Devices list sorts on the server (`sort`/`order`, bounded) and
 * runs an action on a selection of 10 (add to a group, one request). Screenshots at 1366, 800 and
 * 390 px in .tmp/screenshots.
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
  const seeded = await seedDevices(server, 30);
  // Names in an order the ids do not have: board-29 first by id, board-00 last.
  await server.db.write(async (tx) => {
    for (const [i, d] of seeded.entries()) await tx.run("UPDATE devices SET name = ? WHERE id = ?", [`board-${String(29 - i).padStart(2, "0")}`, d.id]);
  });
  group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "bench" } })).body.id;
  ({ browser, admin } = await signedInAdmin(server));
});

test("GET /api/v2/devices?sort=&order=: ordered on the server, ties by id; an unknown sort is a 400", async () => {
  const names = async (query: string) => ((await server.call("GET", `/api/v2/devices?limit=5&${query}`)).body as Array<{ name: string }>).map((d) => d.name);
  assert.deepEqual(await names("sort=name"), ["board-00", "board-01", "board-02", "board-03", "board-04"]);
  assert.deepEqual(await names("sort=name&order=desc"), ["board-29", "board-28", "board-27", "board-26", "board-25"]);
  assert.deepEqual(await names(""), ["board-29", "board-28", "board-27", "board-26", "board-25"], "by id without sort");
  for (const query of ["sort=metadata", "sort=name;DROP", "order=up"]) {
    const res = await server.call("GET", `/api/v2/devices?${query}`);
    assert.equal(res.status, 400, query);
    assert.match(res.body.error, /must be/);
  }
});

test("the Devices page sorts by a column header and adds a selection of 10 to a group", async () => {
  const { page } = admin;
  for (const [width, height] of [[1366, 900], [800, 900], [390, 844]] as const) {
    await page.setViewportSize({ width, height });
    await page.goto("/#/devices");
    await page.reload();
    await page.locator("tbody tr").first().waitFor();
    await page.getByRole("button", { name: /^Device/ }).click();
    await page.waitForFunction(() => document.querySelector("tbody tr a")?.textContent === "board-00");
    assert.match(page.url(), /sort=name/);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth), `no horizontal overflow at ${width} px`);
    await admin.shot(`devices-sorted-${width}`);
    await page.getByRole("button", { name: /^Device/ }).click();
    await page.waitForFunction(() => document.querySelector("tbody tr a")?.textContent === "board-29");
    assert.match(page.url(), /order=desc/);
  }
  await page.setViewportSize({ width: 1366, height: 900 });
  // A third click leaves the order to the server (by id); a fourth sorts by name again.
  await page.getByRole("button", { name: /^Device/ }).click();
  await page.waitForFunction(() => !location.hash.includes("sort="));
  await page.getByRole("button", { name: /^Device/ }).click();
  await page.waitForFunction(() => document.querySelector("tbody tr a")?.textContent === "board-00");
  for (let i = 0; i < 10; i++) await page.getByLabel(`Select board-${String(i).padStart(2, "0")}`).check();
  const bar = page.getByRole("region", { name: "Selected rows" });
  await bar.getByText("10 selected").waitFor();
  await bar.getByRole("button", { name: "Add to group…" }).click();
  const dialog = page.getByRole("dialog", { name: "Add 10 devices to a group" });
  await admin.shot("devices-selection-dialog");
  await dialog.getByRole("button", { name: "Add to group" }).click();
  await page.getByText("10 devices added to the group").waitFor();
  await bar.waitFor({ state: "detached" });
  const members = (await server.call("GET", `/api/v2/devices`)).body as Array<{ name: string; groups: number[] }>;
  assert.deepEqual(members.filter((d) => d.groups.includes(group)).map((d) => d.name).sort(), Array.from({ length: 10 }, (_, i) => `board-${String(i).padStart(2, "0")}`));
  await page.locator("tbody tr").first().getByText("bench").waitFor();
  await closeMessages(page);
  await admin.shot("devices-selection-done");
  admin.clean([SIGNED_OUT]);
});
