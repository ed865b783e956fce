import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { Browser } from "playwright-core";
import { buildConsole } from "../../src/console/build.ts";
import { useTestServer } from "../helpers/server.ts";
import { adminPassword, launch, openTab, signIn, SIGNED_OUT } from "./browser.ts";

let browser: Browser;
// Registered first, so it runs first: the browser closes before the server.
after(async () => {
  await browser?.close();
});
const server = useTestServer({}, async () => {
  browser = await launch();
});

test("the first page stays under 150 KB gzipped; the terminal is a chunk of its own", async () => {
  const { files, firstPageGzip } = await buildConsole();
  assert.ok(firstPageGzip < 150 * 1024, `first page ${firstPageGzip} bytes gzipped`);
  assert.ok([...files.keys()].some((name) => /^xterm-.*\.css$/.test(name)));
});

test("the page and its files are served with their types, caching and a strict CSP", async () => {
  const page = await fetch(`${server.url}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get("content-type")!, /^text\/html/);
  assert.equal(page.headers.get("cache-control"), "no-cache");
  assert.match(page.headers.get("content-security-policy")!, /script-src 'self'/);
  const html = await page.text();
  const script = html.match(/<script type="module" src="([^"]+)"/)![1]!;
  const js = await fetch(server.url + script);
  assert.equal(js.status, 200);
  assert.match(js.headers.get("content-type")!, /^text\/javascript/);
  assert.match(js.headers.get("cache-control")!, /immutable/);
  assert.equal((await fetch(`${server.url}/console/nothing-here.js`)).status, 404);
  assert.equal((await fetch(`${server.url}/console/..%2Fadmin.password`)).status, 404);
});

test("first login with data/admin.password; a wrong password is a message; sign-out returns to the form", async () => {
  const tab = await openTab(browser, server.url);
  try {
    await tab.page.goto("/");
    await tab.page.locator('input[name="username"]').fill("admin");
    await tab.page.locator('input[name="password"]').fill("wrong");
    await tab.page.getByRole("button", { name: "Sign in" }).click();
    await tab.page.getByRole("alert").filter({ hasText: "invalid username or password" }).waitFor();
    // By keyboard alone: the name field has the focus, Tab to the password, Enter signs in.
    await tab.page.locator('input[name="username"]').fill("");
    await tab.page.locator('input[name="password"]').fill("");
    await tab.page.locator('input[name="username"]').focus();
    await tab.page.keyboard.type("admin");
    await tab.page.keyboard.press("Tab");
    await tab.page.keyboard.type(adminPassword(server.dataDir));
    await tab.page.keyboard.press("Enter");
    await tab.page.getByRole("heading", { name: "Devices" }).waitFor();
    for (const name of ["Devices"]) assert.ok(await tab.page.getByRole("navigation", { name: "Main" }).getByRole("link", { name }).isVisible());
    await tab.shot("login-devices");
    await tab.page.getByRole("button", { name: "Sign out" }).click();
    await tab.page.locator('input[name="username"]').waitFor();
    tab.clean([SIGNED_OUT, /^401 POST \/api\/v1\/auth\/login$/]);
  } finally {
    await tab.close();
  }
});

test("a cross-site POST carrying the session cookie is refused", async () => {
  const tab = await openTab(browser, server.url);
  try {
    await signIn(tab.page, "admin", adminPassword(server.dataDir));
    const forged = await tab.context.request.post(`${server.url}/api/v2/groups`, {
      headers: { origin: "http://evil.example", "content-type": "application/json" },
      data: { metadata: { name: "forged" } },
    });
    assert.equal(forged.status(), 403);
    const groups = (await (await server.request("/api/v2/groups", { token: server.adminToken })).json()) as unknown[];
    assert.equal(groups.length, 0);
    // The same request from the console's own origin works (the cookie alone is the session).
    const own = await tab.context.request.post(`${server.url}/api/v2/groups`, {
      headers: { origin: server.url, "content-type": "application/json" },
      data: { metadata: { name: "own" } },
    });
    assert.equal(own.status(), 200);
    tab.clean([SIGNED_OUT]);
  } finally {
    await tab.close();
  }
});

test("the Devices list at 10,000 devices: a page of 50 from the server, paging, the filter", async () => {
  const now = new Date().toISOString();
  await server.db.write(async (tx) => {
    for (let i = 0; i < 10_000; i++) {
      const mac = (0x020000000000 + i).toString(16).padStart(12, "0").match(/../g)!.join(":");
      const metadata = JSON.stringify({ "svc.software.version": `v${i % 7}`, "svc.hardware.devtype": "board", "svc.hardware.macaddr": mac });
      await tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata) VALUES (?, ?, ?, '{}', ?)", [now, `rack-${i}`, mac, metadata]);
    }
  });
  const tab = await openTab(browser, server.url);
  try {
    await signIn(tab.page, "admin", adminPassword(server.dataDir));
    await tab.page.getByText("10,000 approved").waitFor();
    assert.equal(await tab.page.locator("tr[data-mac]").count(), 50);
    await tab.page.getByRole("button", { name: "Next ›" }).click();
    await tab.page.getByText("51–100 of 10,000").waitFor();
    await tab.page.getByRole("searchbox", { name: "Filter devices" }).fill("rack-9999");
    await tab.page.getByText("1 matching").waitFor();
    assert.equal(await tab.page.locator("tr[data-mac]").count(), 1);
    assert.match(tab.page.url(), /q=rack-9999/);
    await tab.shot("devices-10000-filtered");
    tab.clean([SIGNED_OUT]);
  } finally {
    await tab.close();
  }
});
