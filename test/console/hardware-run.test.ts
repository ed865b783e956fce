/**
 * A technician's board check in the console (issue 27): the hardware samples run from the Start
 * dialog against a fake board like any other config, and the camera's frame previews as an image
 * on the run page. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { FakeBoard, sampleBoard } from "../helpers/fake-board.ts";
import { useTestServer } from "../helpers/server.ts";
import { uploadConfig } from "../testrun/run-helpers.ts";
import { SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

const SAMPLES = join(process.cwd(), "assets", "testrun", "samples");
/** The camera sample, saving its frame as PNG (what the fake camera gives). */
const CAMERA = readFileSync(join(SAMPLES, "camera.yml"), "utf8").replace("save_file: frame.jpg", "save_file: frame.png");

let board: FakeBoard;
let browser: Browser;
let admin: Tab;

after(async () => {
  await browser?.close();
});
useTestServer(
  () => {
    board = sampleBoard(new FakeBoard());
    return { test_server: board.config as never };
  },
  async (gateway) => {
    await uploadConfig(gateway, "camera.yml", CAMERA);
    for (const sample of ["network.yml", "gpio.yml", "i2c.yml"]) await uploadConfig(gateway, sample, readFileSync(join(SAMPLES, sample), "utf8"));
    ({ browser, admin } = await signedInAdmin(gateway));
  },
);
after(() => board?.remove());

const status = (page: Page, value: string) => page.locator(`.page-header [data-status="${value}"]`);

async function startRun(page: Page, config: string) {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Test runs", exact: true }).click();
  await page.getByRole("button", { name: "Start a run…" }).click();
  const dialog = page.getByRole("dialog", { name: "Start a test run" });
  await dialog.locator('select[name="config_name"]').selectOption(config);
  await dialog.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);
}

test("a camera check from the Start dialog: its rows in the report, the frame previewed as an image", async () => {
  const { page } = admin;
  await startRun(page, "camera.yml");
  await status(page, "finished").waitFor({ timeout: 15_000 });
  await page.getByLabel("Report counts").waitFor();
  assert.deepEqual(
    await page.locator("table.report tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-case"))),
    ["frame[test_config0]", "device_name[test_config0]", "driver_name[test_config0]"],
  );
  assert.match(await page.locator("table.report tbody tr").first().innerText(), /^passed\tframe\[test_config0\]\t\/dev\/video0/);

  await page.locator('[data-artifact="frame.png"]').getByRole("button", { name: "Preview" }).click();
  // The fake camera's frame is a 160×120 PNG test card: the browser decoded it.
  await page.waitForFunction(() => (document.querySelector("img.preview-image") as HTMLImageElement | null)?.naturalWidth === 160);
  await page.locator(".artifact-preview").scrollIntoViewIfNeeded();
  await admin.shot("hardware-camera-frame");
  admin.clean([SIGNED_OUT]);
});

test("a failing board check reads like any other: the reference's message on the failed row, first", async () => {
  const { page } = admin;
  // The link went down to 100 Mb/s.
  board.attrs("sys/class/net/eth0", { speed: 100 });
  await startRun(page, "network.yml");
  await status(page, "failed").waitFor({ timeout: 15_000 });
  await page.getByLabel("Report counts").waitFor();
  const first = page.locator("table.report tbody tr").first();
  assert.match(await first.innerText(), /^failed\tspeed\[test_config0\]\teth0[\s\S]*AssertionError: Expected speed 1000, but got 100/);
  await admin.shot("hardware-network-failed");
  admin.clean();
});
