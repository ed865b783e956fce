/**
 * The console's browser tests: Debian's chromium driven by playwright-core (no browser download).
 * Every page records console errors, uncaught errors and failed requests; `clean()` asserts there
 * were none besides those a test expects. Screenshots go to .tmp/screenshots (gitignored).
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
export const SCREENSHOTS = join(process.cwd(), ".tmp", "screenshots");

export async function launch(): Promise<Browser> {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (.ci/run does)`);
  // launch() gives every browser a fresh temporary profile (user data dir).
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

export interface Tab {
  page: Page;
  context: BrowserContext;
  /** Console errors, page errors and failed requests ("401 GET /api/whoami"), in order. */
  problems: string[];
  /** Asserts no problems besides those matching `allowed` (each may match any number) since the last call. */
  clean(allowed?: RegExp[]): void;
  /** A screenshot of what the viewport shows (`full`: the whole page). */
  shot(name: string, full?: boolean): Promise<void>;
  close(): Promise<void>;
}

export async function openTab(browser: Browser, baseURL: string, viewport = { width: 1280, height: 800 }): Promise<Tab> {
  const context = await browser.newContext({ baseURL, viewport });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on("console", (msg) => {
    // Chrome also logs failed requests as console errors; those are counted from the responses.
    if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) problems.push(`console: ${msg.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("response", (res) => {
    if (res.status() >= 400) problems.push(`${res.status()} ${res.request().method()} ${new URL(res.url()).pathname}`);
  });
  page.on("requestfailed", (req) => {
    const reason = req.failure()?.errorText ?? "";
    // Leaving a page aborts its event stream and pending loads: not a problem.
    if (!reason.includes("ERR_ABORTED")) problems.push(`failed ${req.method()} ${new URL(req.url()).pathname}: ${reason}`);
  });
  return {
    page,
    context,
    problems,
    clean(allowed = []) {
      const left = problems.filter((p) => !allowed.some((a) => a.test(p)));
      problems.length = 0;
      assert.deepEqual(left, [], `problems on the page:\n${left.join("\n")}`);
    },
    async shot(name, full = false) {
      mkdirSync(SCREENSHOTS, { recursive: true });
      await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: full });
    },
    close: () => context.close(),
  };
}

/** A new browser with one tab signed in as `admin` on `server`: how the console tests begin. */
export async function signedInAdmin(server: { url: string; dataDir: string }): Promise<{ browser: Browser; admin: Tab }> {
  const browser = await launch();
  const admin = await openTab(browser, server.url);
  await signIn(admin.page, "admin", adminPassword(server.dataDir));
  return { browser, admin };
}

/** Signs in through the login form. */
export async function signIn(page: Page, username: string, password: string): Promise<void> {
  await page.goto("/");
  await page.locator('input[name="username"]').fill(username);
  await page.locator('input[name="password"]').fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: "Sign out" }).waitFor();
}

/** Closes the messages (toasts) earlier steps left open, so that they do not cover the next screenshot. */
export async function closeMessages(page: Page): Promise<void> {
  await page.evaluate(() => document.querySelectorAll<HTMLButtonElement>('.toasts button[aria-label="Close message"]').forEach((button) => button.click()));
}

export const adminPassword = (dataDir: string): string => readFileSync(join(dataDir, "admin.password"), "utf8").trim();

/** The boot request of a signed-out page: expected, not a problem. */
export const SIGNED_OUT = /^401 GET \/api\/whoami$/;
