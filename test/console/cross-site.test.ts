/**
 * Pages of other sites cannot make the gateway act (issue 24): a page on another port of
 * 127.0.0.1 (same-site: the SameSite=Strict session cookie goes along) and one on `localhost`
 * (cross-site) send what a page can send without a preflight (an image, a no-cors fetch with a
 * form or a Blob, a WebSocket) to a gateway with a signed-in admin and to one with
 * `test_server.auth: none`. Nothing is run or stored; the console's own page still acts.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { adminPassword, launch, openTab, signIn, SIGNED_OUT, type Tab } from "./browser.ts";
import type { Browser } from "playwright-core";

let browser: Browser;
const agents: Agent[] = [];
// Registered first, so they run first: the browser and agents stop before the servers close.
after(async () => {
  await browser?.close();
  for (const agent of agents) await agent.stop();
});

/** The other site: serves `/<name>` from `pages` on 127.0.0.1 and a free port. */
const pages = new Map<string, string>();
let site: Server;
let sitePort = 0;
before(async () => {
  browser = await launch();
  site = createServer((req, res) => {
    const html = pages.get((req.url ?? "").slice(1));
    res.writeHead(html === undefined ? 404 : 200, { "content-type": "text/html; charset=utf-8" }).end(html ?? "");
  });
  await new Promise<void>((resolve) => site.listen(0, "127.0.0.1", resolve));
  sitePort = (site.address() as AddressInfo).port;
});
after(() => new Promise<void>((resolve) => site.close(() => resolve())));

/** The pages of the other site, on another port of 127.0.0.1 (same-site) and on localhost (cross-site). */
const origins = () => [`http://127.0.0.1:${sitePort}`, `http://localhost:${sitePort}`];

/**
 * Opens the other site's page `name` (its script sets `window.done` once every request has an
 * answer) and returns the requests it made to `gateway` ("METHOD /path"), and the statuses of
 * those whose answer the browser reports (an image's JSON answer is blocked before that).
 */
async function visit(tab: Tab, origin: string, name: string, gateway: string): Promise<{ requests: string[]; statuses: number[] }> {
  const requests: string[] = [];
  const statuses: number[] = [];
  // Only the other site's requests: the console page that was open before may still be loading.
  const fromSite = (req: import("playwright-core").Request) => req.url().startsWith(gateway) && !!req.headers()["referer"]?.startsWith(origin);
  const onRequest = (req: import("playwright-core").Request) => void (fromSite(req) && requests.push(`${req.method()} ${new URL(req.url()).pathname}`));
  const onResponse = (res: import("playwright-core").Response) => void (fromSite(res.request()) && statuses.push(res.status()));
  tab.page.on("request", onRequest).on("response", onResponse);
  try {
    await tab.page.goto(`${origin}/${name}`);
    await tab.page.waitForFunction(() => (window as unknown as { done?: boolean }).done === true, undefined, { timeout: 10_000 });
  } finally {
    tab.page.off("request", onRequest).off("response", onResponse);
  }
  return { requests: requests.sort(), statuses };
}

/** A page script that runs `steps` (each a promise of one request) and then sets `window.done`. */
const attackPage = (steps: string) => `<!doctype html><meta charset=utf-8><title>another site</title><script>
const image = (src) => new Promise((resolve) => { const img = new Image(); img.onload = img.onerror = resolve; img.src = src; });
const socket = (url) => new Promise((resolve) => { const ws = new WebSocket(url); ws.onopen = () => { window.opened = true; ws.close(); resolve(); }; ws.onerror = ws.onclose = resolve; });
const post = (url, body) => fetch(url, { method: "POST", mode: "no-cors", credentials: "include", body }).catch(() => {});
Promise.all([${steps}]).then(() => { window.done = true; });
</script>`;

describe("a signed-in admin's browser", () => {
  const server = useTestServer(FAST_SERVER);
  let mac = "";
  before(async () => {
    const agent = startAgent(server);
    agents.push(agent);
    await untilConnected(server, await approveAgent(server, agent));
    mac = agent.mac;
  });

  test("a page on another port or on localhost runs no action, creates no group and opens no shell", async () => {
    const gateway = server.url;
    const ws = gateway.replace(/^http/, "ws");
    pages.set(
      "session",
      attackPage(`
        image("${gateway}/api/v2/devices/${mac}/action/exec/ok"),
        post("${gateway}/api/v2/groups", new Blob(['{"metadata":{"name":"forged"}}'])),
        post("${gateway}/api/v1/tokens/revoke", new Blob(['{"user":"admin"}'])),
        socket("${ws}/api/v1/devices/${mac}/shell"),`),
    );
    const tab = await openTab(browser, gateway);
    try {
      await signIn(tab.page, "admin", adminPassword(server.dataDir));
      for (const origin of origins()) {
        const { requests, statuses } = await visit(tab, origin, "session", gateway);
        assert.deepEqual(requests, [`GET /api/v2/devices/${mac}/action/exec/ok`, "POST /api/v1/tokens/revoke", "POST /api/v2/groups"], `from ${origin}`);
        assert.ok(statuses.length >= 2 && statuses.every((s) => s === 403), `from ${origin}: ${statuses.join(", ")}`);
        assert.equal(await tab.page.evaluate(() => (window as unknown as { opened?: boolean }).opened ?? false), false, `a shell opened from ${origin}`);
      }
      // What the browser said of the refusals: 403s, and the image's answer blocked as not an image.
      tab.clean([SIGNED_OUT, /^403 POST /, /ERR_BLOCKED_BY_ORB/, /WebSocket .* Unexpected response code: 403$/]);
      const log = await server.call("GET", `/api/v2/devices/${mac}/action/log`);
      assert.deepEqual(log.body, [], "an action ran");
      assert.deepEqual((await server.call("GET", "/api/v2/groups")).body, []);

      // The console's own page still acts with the cookie alone, and a HEAD of the action runs nothing.
      await tab.page.goto(`${gateway}/`);
      const own = await tab.page.evaluate(async (path) => (await fetch(path)).status, `/api/v2/devices/${mac}/action/exec/ok`);
      assert.equal(own, 200);
      const head = await tab.page.evaluate(async (path) => (await fetch(path, { method: "HEAD" })).status, `/api/v2/devices/${mac}/action/exec/ok`);
      assert.equal(head, 405);
      assert.equal(((await server.call("GET", `/api/v2/devices/${mac}/action/log`)).body as unknown[]).length, 1);
      tab.clean([SIGNED_OUT, /^405 HEAD /]);
      // The session was not revoked by the page.
      assert.equal(await tab.page.evaluate(async () => (await fetch("/api/whoami")).status), 200);
    } finally {
      await tab.close();
    }
  });
});

describe("a gateway with test_server.auth: none", () => {
  const server = useTestServer({ test_server: { auth: "none", cors_origins: ["http://lab-ui.example:8080"] } });

  test("a page on another port or on localhost uploads no config and starts no run", async () => {
    const gateway = server.url;
    const yaml = "tests:\\n  base:\\n  - exec:\\n      command: touch ../../../pwned\\n";
    pages.set(
      "open",
      attackPage(`
        (() => { const form = new FormData(); form.append("file", new Blob(["${yaml}"]), "evil.yml"); return post("${gateway}/api/v1/configs", form); })(),
        post("${gateway}/api/v1/test-runs", new Blob(['{"config_name":"evil.yml"}'])),
        post("${gateway}/api/v1/test-runs", new URLSearchParams({ config_name: "evil.yml" })),`),
    );
    const tab = await openTab(browser, gateway);
    try {
      for (const origin of origins()) {
        const { requests, statuses } = await visit(tab, origin, "open", gateway);
        assert.deepEqual(requests, ["POST /api/v1/configs", "POST /api/v1/test-runs", "POST /api/v1/test-runs"], `from ${origin}`);
        assert.deepEqual(statuses, [403, 403, 403], `from ${origin}`);
      }
      assert.deepEqual((await server.call("GET", "/api/v1/configs")).body, []);
      assert.deepEqual((await server.call("GET", "/api/v1/test-runs")).body, []);
    } finally {
      await tab.close();
    }
  });

  test("clients without Origin or Sec-Fetch-Site act; an origin listed in cors_origins acts; a JSON route needs a JSON type", async () => {
    const form = new FormData();
    form.append("file", new Blob(["tests:\n  base:\n  - sleep:\n      seconds: 0\n"]), "ok.yml");
    assert.equal((await server.request("/api/v1/configs", { method: "POST", body: form })).status, 200);
    const listed = await server.request("/api/v1/test-runs", { method: "POST", headers: { origin: "http://lab-ui.example:8080", "sec-fetch-site": "cross-site", "content-type": "application/json" }, body: '{"config_name":"ok.yml"}' });
    assert.equal(listed.status, 200);
    const other = await server.request("/api/v1/test-runs", { method: "POST", headers: { origin: "http://other.example:8080", "content-type": "application/json" }, body: '{"config_name":"ok.yml"}' });
    assert.equal(other.status, 403);
    const untyped = await server.request("/api/v1/test-runs", { method: "POST", body: '{"config_name":"ok.yml"}' });
    assert.equal(untyped.status, 415);
    assert.deepEqual(await untyped.json(), { error: "expected a JSON body (Content-Type: application/json), got text/plain;charset=UTF-8" });
  });
});
