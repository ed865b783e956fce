/**
 * The update server's pages in a real browser, against a real server and in-process agents:
 * approve a registration, upload a package with the progress bar, make a group, watch the
 * update progress reach 100 % live, run an action, open the terminal, fetch a file, tags, users
 * and permissions; at 1280x800 and at 390 px wide. Screenshots in .tmp/screenshots.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { adminPassword, closeMessages, openTab, SIGNED_OUT, signedInAdmin, signIn, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
const agents: Array<{ stop(): Promise<void> }> = [];
// Registered first, so it runs first: the agents and the browser go before the server closes.
after(async () => {
  for (const agent of agents) await agent.stop();
  await browser?.close();
});
const server = useTestServer(FAST_SERVER, async (server) => {
  ({ browser, admin } = await signedInAdmin(server));
});

const nav = (page: Page, name: string) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true }).click();
/** Where the agent's install command copies the package: outside the data dir, in a temp dir of its own. */
const marker = () => join(tempDir("labgate-installed-"), "image");

/** Waits until the server lists a pending registration of `mac`: the Registrations page reads the list again only every 5 s. */
const pendingListed = (mac: string) =>
  waitFor(async () => (await server.call<Array<{ mac_address: string }>>("GET", "/api/v1/auth/pending")).body.some((p) => p.mac_address === mac), 5000, `the pending registration of ${mac}`);

let deviceId = 0;
let mac = "";
let agent: ReturnType<typeof startAgent>;

test("a registration from a real agent is approved on the Registrations page; the device shows online", async () => {
  const { page } = admin;
  agent = startAgent(server, {
    name: "bench-7",
    device_type: "board",
    software_version: "v1",
    install_command: ["sh", "-c", 'cp "$1" "$2"', "install", "{file}", marker()],
    shell: { command: ["sh"], idle_timeout: 30 },
  });
  agents.push(agent);
  mac = agent.mac;
  await pendingListed(mac);
  await nav(page, "Registrations");
  const row = page.locator(`tr[data-mac="${mac}"]`);
  await row.waitFor();
  assert.match(await row.innerText(), /[0-9a-f]{4} [0-9a-f]{4}/, "the key fingerprint is shown");
  await admin.shot("registrations");
  await row.getByRole("button", { name: "Approve" }).click();
  await row.waitFor({ state: "detached" });
  await agent.approved;
  await nav(page, "Devices");
  const deviceRow = page.locator(`tr[data-mac="${mac}"]`);
  await deviceRow.getByText("online").waitFor();
  assert.match(await deviceRow.innerText(), /bench-7[\s\S]*v1[\s\S]*board/);
  deviceId = Number((await deviceRow.getByRole("link").first().getAttribute("href"))!.replace(/\D+/g, ""));
  await untilConnected(server, deviceId);
  admin.clean([SIGNED_OUT]);
});

test("upload with the progress bar, a group with policy, package and device; the update's progress reaches 100 % live", async () => {
  const { page } = admin;
  await nav(page, "Packages");
  await page.locator('input[name="file"]').setInputFiles({ name: "image-v2.bin", mimeType: "application/octet-stream", buffer: randomBytes(3 * 1024 * 1024) });
  await page.locator('input[name="version"]').fill("v2");
  await page.locator('input[name="devtype"]').fill("board");
  await page.getByRole("button", { name: "Upload" }).click();
  // The bar is shown while the upload runs and ends at 100 %.
  await page.getByRole("progressbar", { name: "upload progress" }).and(page.locator('[aria-valuenow="100"]')).waitFor();
  const pkgRow = page.locator("tr[data-package]").filter({ hasText: "v2" });
  await pkgRow.waitFor();
  assert.match(await pkgRow.innerText(), /board[\s\S]*3\.0 MB/);
  await pkgRow.getByRole("button", { name: "Copy link" }).click();
  await page.getByText("Download link copied").waitFor();
  await admin.shot("packages");

  await nav(page, "Groups");
  await page.locator('input[name="group-name"]').fill("lab bench");
  await page.getByRole("button", { name: "Create group" }).click();
  await page.getByRole("heading", { name: "lab bench" }).waitFor();
  await page.getByRole("combobox", { name: "Policy" }).selectOption("exact_match");
  await page.getByRole("textbox", { name: "Target version" }).fill("v2");
  await page.getByRole("button", { name: "Save policy" }).click();
  await page.getByText("exactly v2").first().waitFor();
  await page.getByRole("combobox", { name: "Package to add" }).selectOption({ label: `v2 · board (#1)` });
  await page.getByRole("button", { name: "Add package" }).click();
  await page.getByRole("button", { name: /Remove v2 · board/ }).waitFor();
  await page.getByRole("searchbox", { name: "Find a device to add" }).fill("bench-7");
  await page.getByRole("button", { name: "Add bench-7" }).click();
  await page.getByRole("button", { name: "Remove bench-7 from the group" }).waitFor();
  // A second group of the same priority cannot take the device: the server's 409 is the message.
  await admin.shot("group");

  await nav(page, "Devices");
  const row = page.locator(`tr[data-mac="${mac}"]`);
  await row.getByText("online").waitFor();
  await agent.checkNow();
  await row.getByRole("progressbar").and(page.locator('[aria-valuenow="100"]')).waitFor({ timeout: 20_000 });
  await admin.shot("devices-update-100");
  await waitFor(() => agent.softwareVersion === "v2", 10_000, "agent at v2");
  // The list reads the row again once the update is through: the new version, the group's name.
  await row.locator("td.mono").getByText("v2", { exact: true }).waitFor();
  assert.match(await row.innerText(), /lab bench/);
  admin.clean([SIGNED_OUT]);
});

test("two groups of one priority refuse the device with the server's message", async () => {
  const { page } = admin;
  await nav(page, "Groups");
  await page.locator('input[name="group-name"]').fill("other");
  await page.getByRole("button", { name: "Create group" }).click();
  await page.getByRole("heading", { name: "other" }).waitFor();
  await page.getByRole("searchbox", { name: "Find a device to add" }).fill("bench-7");
  await page.getByRole("button", { name: "Add bench-7" }).click();
  await page.getByRole("alert").filter({ hasText: "same priority" }).waitFor();
  await admin.shot("group-409");
  await page.getByRole("button", { name: "Delete group" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete group" }).click();
  await page.getByRole("heading", { name: "Groups" }).waitFor();
  admin.clean([SIGNED_OUT, /^409 PATCH \/api\/v2\/groups\/\d+\/devices$/]);
});

test("the device page: run an action and read its output, tags, a file from the device, the terminal", async () => {
  const { page } = admin;
  writeFileSync(join(agent.dir, "files", "boot.log"), "booted fine\n");
  await closeMessages(page);
  await page.goto(`/#/devices/${deviceId}`);
  await page.getByRole("heading", { name: /bench-7/ }).waitFor();
  await page.getByRole("button", { name: "Run Echo" }).click();
  const result = page.locator(".action-result");
  await result.getByText("exit 3").waitFor();
  assert.match(await result.locator("pre").innerText(), /hello[\s\S]*oops/);
  await page.locator("details summary").filter({ hasText: "output" }).first().waitFor();

  await page.getByRole("textbox", { name: "New tag" }).fill("rack-a");
  await page.getByRole("button", { name: "Add tag" }).click();
  await page.getByRole("button", { name: "Remove tag rack-a" }).waitFor();

  await page.getByRole("textbox", { name: "Absolute path on the device" }).fill(join(agent.dir, "files", "boot.log"));
  await page.getByRole("button", { name: "Fetch" }).click();
  const link = page.getByRole("link", { name: "Download boot.log" });
  await link.waitFor();
  const body = await (await fetch(new URL((await link.getAttribute("href"))!, server.url))).text();
  assert.equal(body, "booted fine\n");

  await page.getByRole("button", { name: "Open terminal" }).click();
  const terminal = page.locator(".terminal-box .xterm");
  await terminal.waitFor();
  await page.waitForFunction(() => document.querySelector(".terminal-box")?.textContent?.includes("connecting") ?? false);
  await page.keyboard.type("echo from-the-$((40+2))-shell");
  await page.keyboard.press("Enter");
  await page.locator(".terminal-box").getByText("from-the-42-shell").waitFor();
  await admin.shot("device");
  await page.getByRole("button", { name: "Close terminal" }).click();
  admin.clean([SIGNED_OUT]);
});

test("a user with read on one device sees only that device; no Users or Registrations for them", async () => {
  const { page } = admin;
  const second = startAgent(server, { name: "bench-8" });
  agents.push(second);
  await approveAgent(server, second);
  await nav(page, "Users");
  await page.getByText("Add an account").click();
  await page.locator('input[name="name"]').fill("tech");
  await page.locator('input[name="password"]').fill("tech-password-1");
  await page.getByRole("button", { name: "Create account" }).click();
  await page.locator('tr[data-account="tech"]').waitFor();
  await page.locator('select[name="user"]').selectOption("tech");
  await page.locator('select[name="permission"]').selectOption("read");
  // The device is picked by name (the picker lists devices; its value is the id).
  await page.getByLabel("Choose a device").locator(`option[value="${deviceId}"]`).waitFor({ state: "attached" });
  await page.getByLabel("Choose a device").selectOption(String(deviceId));
  await page.getByRole("button", { name: "Add permission" }).click();
  await page.locator('table[aria-label="Permissions"] tr[data-user="tech"]').getByText(`#${deviceId}`).waitFor();
  await admin.shot("users");

  const tech = await openTab(browser, server.url, { width: 390, height: 800 });
  try {
    await signIn(tech.page, "tech", "tech-password-1");
    await tech.page.getByText("1 approved").waitFor();
    assert.equal(await tech.page.locator("tr[data-mac]").count(), 1);
    assert.equal(await tech.page.locator(`tr[data-mac="${mac}"]`).count(), 1);
    await tech.shot("narrow-devices-tech");
    await tech.page.getByRole("button", { name: "Menu" }).click();
    const links = await tech.page.getByRole("navigation", { name: "Main" }).getByRole("link").allInnerTexts();
    assert.deepEqual(links, ["Devices", "Groups", "Deployments", "Packages", "Versions"]);
    await tech.shot("narrow-menu-tech");
    await tech.page.getByRole("link", { name: "Devices" }).click();
    await tech.page.locator(`tr[data-mac="${mac}"]`).getByRole("link").first().click();
    await tech.page.getByRole("heading", { name: /bench-7/ }).waitFor();
    await tech.page.getByText("Echo").first().waitFor();
    await tech.shot("narrow-device-tech");
    tech.clean([SIGNED_OUT]);
  } finally {
    await tech.close();
  }
  // Disabling asks first; the account shows disabled, then enabled again.
  const row = page.locator('tr[data-account="tech"]');
  await row.getByRole("button", { name: "Disable" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Disable" }).click();
  await row.getByText("disabled").waitFor();
  await row.getByRole("button", { name: "Enable" }).click();
  await row.getByText("active").waitFor();
  // Deleting asks first; the account and its permission go.
  await row.getByRole("button", { name: "Delete" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
  await row.waitFor({ state: "detached" });
  await page.getByRole("cell", { name: `device ${deviceId}` }).waitFor({ state: "detached" });
  assert.equal((await server.call("GET", "/api/v1/users")).body.some((a: { name: string }) => a.name === "tech"), false);
  admin.clean([SIGNED_OUT]);
});

test("at 390 px wide the group and packages pages fit without a page-wide scroll", async () => {
  const narrow = await openTab(browser, server.url, { width: 390, height: 800 });
  try {
    await signIn(narrow.page, "admin", adminPassword(server.dataDir));
    for (const [path, heading, name] of [["/groups/1", "lab bench", "narrow-group"], ["/packages", "Packages", "narrow-packages"]] as const) {
      await narrow.page.goto(`/#${path}`);
      await narrow.page.getByRole("heading", { name: heading }).waitFor();
      const width = await narrow.page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= 390, `${path}: ${width}px wide`);
      await narrow.shot(name);
    }
    narrow.clean([SIGNED_OUT]);
  } finally {
    await narrow.close();
  }
});

test("a flood of registrations: the Registrations page loads one page at a time and pages through them", async () => {
  const { page } = admin;
  // 120 pending registrations straight into the table (as 20 addresses' floods would leave them).
  const now = new Date().toISOString();
  await server.db.write(async (tx) => {
    for (let i = 0; i < 120; i++) {
      const flood = `02:fe:00:00:${(i >> 8).toString(16).padStart(2, "0")}:${(i & 255).toString(16).padStart(2, "0")}`;
      await tx.run("INSERT INTO registrations (mac_address, key_fingerprint, public_key, metadata, last_appeared, client_address) VALUES (?, ?, 'k', ?, ?, ?)", [
        flood,
        randomBytes(32).toString("hex"),
        JSON.stringify({ "svc.device.name": `flood-${i}` }),
        now,
        `10.9.0.${i % 20}`,
      ]);
    }
  });
  try {
    const answers: string[] = [];
    page.on("request", (request) => void (request.url().includes("/api/v1/auth/pending") && answers.push(request.url())));
    await nav(page, "Registrations");
    const pager = page.getByRole("navigation", { name: "Pages" });
    await pager.getByText(/^1–50 of 12\d$/).waitFor();
    assert.equal(await page.locator("tbody tr").count(), 50);
    assert.ok(answers.every((url) => /[?&]limit=50\b/.test(url)), `every list request is one page: ${answers.join(" ")}`);
    await admin.shot("registrations-paged");
    await pager.getByRole("button", { name: "Next ›" }).click();
    await pager.getByText(/^51–100 of 12\d$/).waitFor();
    assert.equal(await page.locator("tbody tr").count(), 50);
    admin.clean([SIGNED_OUT]);
  } finally {
    await server.db.run("DELETE FROM registrations WHERE mac_address LIKE '02:fe:%'");
  }
});

test("a key change: marked on Registrations, approved only through the confirmation that shows both fingerprints", async () => {
  const { page } = admin;
  await agent.stop();
  const replacement = startAgent(server, { name: "bench-7", mac_address: mac });
  agents.push(replacement);
  await pendingListed(mac);
  await nav(page, "Registrations");
  const row = page.locator(`tr[data-mac="${mac}"]`);
  await row.getByText("key change: device").waitFor();
  await row.getByRole("button", { name: "Approve key change" }).click();
  const dialog = page.getByRole("dialog");
  await dialog.getByText("Current key").waitFor();
  assert.match(await dialog.innerText(), /Current key:\s+[0-9a-f ]+…\s+New key:\s+[0-9a-f ]+…/);
  await admin.shot("registrations-key-change");
  // Cancel changes nothing; the confirmation approves.
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await row.getByRole("button", { name: "Approve key change" }).waitFor();
  await row.getByRole("button", { name: "Approve key change" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Replace the key" }).click();
  await row.waitFor({ state: "detached" });
  await replacement.approved;
  await untilConnected(server, deviceId);
  admin.clean([SIGNED_OUT]);
});
