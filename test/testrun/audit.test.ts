/**
 * Compliance checks across the test-run API (test-run-server.md 1.1, 12-14, 17): HEAD on every
 * GET route, authorization on every route, hostile input, abort answers; and never a 500.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "csv-parse/sync";
import { after, describe, test } from "node:test";
import { loadConfig } from "../../src/config/config.ts";
import { removeDir, startTestServer, tempDir, useTestServer } from "../helpers/server.ts";
import { serverErrors, trigger, uploadConfig, waitRun, type RunObject } from "./run-helpers.ts";

const CONFIG = `aggregate_results: true
metadata:
  kernel:
    run: echo hello
tests:
  g:
  - sleep:
      seconds: 0
`;

describe("test-run API compliance", () => {
  let errors: string[];
  let run: RunObject;
  let results: string;

  const s = useTestServer({}, async (s) => {
    errors = serverErrors(s);
    await uploadConfig(s, "audit.yml", CONFIG);
    await uploadConfig(s, "slow.yml", "tests:\n  g:\n  - sleep:\n      seconds: 30\n");
    run = await waitRun(s, (await trigger(s, { config_name: "audit.yml" })).id);
    assert.equal(run.status, "finished");
    const listed = (await (await s.request(`/api/v1/test-runs/trigger/${run.trigger_id}/results`, { token: s.adminToken })).json()) as { name: string }[];
    results = listed[0].name;
  });

  after(() => {
    assert.deepEqual(errors, [], "no request was answered 500 and nothing was logged as an error");
  });

  /** Every GET route of Variant A (12, 14), with a path that exists. */
  const getRoutes = () => [
    "/api/v1/configs",
    "/api/v1/configs/audit.yml",
    "/api/v1/configs/audit.yml/file",
    "/api/v1/configs/audit.yml/test-suites",
    "/api/v1/configs/audit.yml/override-hints",
    "/api/v1/test-runs",
    `/api/v1/test-runs/${run.id}`,
    `/api/v1/test-runs/${run.id}/report`,
    `/api/v1/test-runs/${run.id}/report?format=json`,
    `/api/v1/test-runs/${run.id}/artifacts`,
    `/api/v1/test-runs/${run.id}/artifacts/kernel`,
    "/api/v1/test-runs/trigger",
    `/api/v1/test-runs/trigger/${run.trigger_id}`,
    `/api/v1/test-runs/trigger/${run.trigger_id}/results`,
    `/api/v1/test-runs/trigger/${run.trigger_id}/results/${results}`,
    "/api/v1/test-nodes",
  ];

  test("HEAD answers on every GET route with the GET status and headers and no body (1.1)", async () => {
    const missing = ["/api/v1/configs/nope.yml/file", `/api/v1/test-runs/${run.id}/artifacts/nope.txt`, "/api/v1/test-runs/nope/report"];
    for (const path of [...getRoutes(), ...missing]) {
      const get = await s.request(path, { token: s.adminToken });
      await get.arrayBuffer();
      const head = await s.request(path, { method: "HEAD", token: s.adminToken });
      assert.equal(head.status, get.status, path);
      assert.equal(head.headers.get("content-type"), get.headers.get("content-type"), path);
      assert.equal(head.headers.get("content-disposition"), get.headers.get("content-disposition"), path);
      assert.equal((await head.arrayBuffer()).byteLength, 0, path);
      assert.equal(missing.includes(path) ? 404 : 200, get.status, path);
      // HEAD is a read like GET: it needs a token too.
      assert.equal((await s.request(path, { method: "HEAD" })).status, 401, path);
    }
  });

  test("every route checks authorization: 401 without a token, 403 with the wrong scope (1.5, 14)", async () => {
    const ro = s.token(["tests_ro"]);
    const other = s.token(["upload_single_file", "create_group"]);
    const form = () => {
      const f = new FormData();
      f.append("file", new Blob(["tests: {}\n"]), "x.yml");
      return f;
    };
    const writes: [string, string, RequestInit & { json?: unknown }][] = [
      ["POST", "/api/v1/configs", { body: form() }],
      ["DELETE", "/api/v1/configs/audit.yml", {}],
      ["POST", "/api/v1/test-runs", { json: { config_name: "audit.yml" } }],
      ["DELETE", `/api/v1/test-runs/${run.id}`, {}],
      ["POST", `/api/v1/test-runs/${run.id}/repeat`, { json: "" }],
      ["DELETE", `/api/v1/test-runs/trigger/${run.trigger_id}`, {}],
    ];
    for (const path of getRoutes()) {
      for (const [token, status] of [[undefined, 401], ["garbage", 401], [other, 403], [ro, 200]] as const) {
        const res = await s.request(path, { ...(token ? { token } : {}) });
        assert.equal(res.status, status, `GET ${path} with ${token === ro ? "tests_ro" : token ?? "no token"}`);
        if (status !== 200) assert.equal(typeof ((await res.json()) as { error: unknown }).error, "string");
        else await res.arrayBuffer();
      }
    }
    for (const [method, path, init] of writes) {
      for (const [token, status] of [[undefined, 401], [other, 403], [ro, 403]] as const) {
        const res = await s.request(path, { method, ...init, ...(method === "POST" && path === "/api/v1/configs" ? { body: form() } : {}), ...(token ? { token } : {}) });
        assert.equal(res.status, status, `${method} ${path}`);
        assert.equal(typeof ((await res.json()) as { error: unknown }).error, "string");
      }
    }
    // Nothing changed: the config and the run are still there.
    assert.equal((await s.request("/api/v1/configs/audit.yml", { token: ro })).status, 200);
    assert.equal(((await (await s.request("/api/v1/test-runs", { token: ro })).json()) as unknown[]).length, 1);
  });

  test("DELETE of a running run answers at once: still running, abort_requested; the run then ends aborted (12.10, 6.6)", async () => {
    const slow = await trigger(s, { config_name: "slow.yml" });
    await waitRun(s, slow.id, (r) => r.status === "running");
    const res = await s.request(`/api/v1/test-runs/${slow.id}`, { method: "DELETE", token: s.adminToken });
    const body = (await res.json()) as RunObject;
    assert.equal(res.status, 200);
    assert.equal(body.status, "running");
    assert.equal(body.abort_requested, true);
    assert.equal(body.finished_at, "");
    // A second DELETE while it is still running answers 200 again (6.6) or, once it ended, 400.
    const again = await s.request(`/api/v1/test-runs/${slow.id}`, { method: "DELETE", token: s.adminToken });
    assert.ok(again.status === 200 || again.status === 400);
    await again.arrayBuffer();
    const done = await waitRun(s, slow.id);
    assert.equal(done.status, "aborted");
  });

  test("the JSON report is streamed row by row: a large report is not built in memory (8.3)", async () => {
    const done = await waitRun(s, (await trigger(s, { config_name: "audit.yml" })).id);
    // Stand in for a run with very many cases: quoting, commas, newlines and quotes in cells.
    const lines = ["device name,test name,module,duration,message,status"];
    for (let i = 0; i < 5_000; i++) lines.push(`"dev, ${i}",case${i}[test_config0],test.py::TestX::test_case${i}[test_config0],0.5,"say ""hi""\nthere",failed`);
    const csv = lines.join("\r\n") + "\r\n";
    writeFileSync(join(s.dataDir, "testrun", "reports", `${done.id}.csv`), csv);
    const res = await s.request(`/api/v1/test-runs/${done.id}/report?format=json`, { token: s.adminToken });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    assert.equal(res.headers.get("content-disposition"), null);
    assert.equal(res.headers.get("content-length"), null, "streamed, not buffered");
    const rows = (await res.json()) as Record<string, string>[];
    assert.deepEqual(rows, parse(csv, { columns: true }));
    assert.deepEqual(rows[7], { "device name": "dev, 7", "test name": "case7[test_config0]", module: "test.py::TestX::test_case7[test_config0]", duration: "0.5", message: 'say "hi"\nthere', status: "failed" });
    // A report whose last row was cut short by a crash mid-write: the complete rows.
    writeFileSync(join(s.dataDir, "testrun", "reports", `${done.id}.csv`), `${lines[0]}\r\n${lines[1]}\r\n"dev, 1",case1,mod,0.1,"unfinished`);
    const cut = await s.request(`/api/v1/test-runs/${done.id}/report?format=json`, { token: s.adminToken });
    assert.equal(cut.status, 200);
    assert.deepEqual(((await cut.json()) as Record<string, string>[]).map((r) => r["test name"]), ["case0[test_config0]"]);
    // A report with only the header is an empty array.
    writeFileSync(join(s.dataDir, "testrun", "reports", `${done.id}.csv`), lines[0] + "\r\n");
    assert.deepEqual(await (await s.request(`/api/v1/test-runs/${done.id}/report?format=json`, { token: s.adminToken })).json(), []);
  });

  test("hostile input: traversal in run, trigger and artifact names; YAML bombs; huge and deep overrides (17)", async () => {
    const t = s.adminToken;
    const status = async (path: string, init: RequestInit & { json?: unknown } = {}) => {
      const res = await s.request(path, { token: t, ...init });
      const body = await res.text();
      if (res.status >= 400) assert.equal(typeof (JSON.parse(body) as { error: unknown }).error, "string", `${path}: ${body}`);
      return res.status;
    };
    const runs = "/api/v1/test-runs";
    for (const id of ["..%2F..%2Fconfigs%2Faudit.yml", "..", "%2e%2e", "a".repeat(5000), "%00", "1%20OR%201=1"]) {
      for (const tail of ["", "/report", "/report?format=json", "/artifacts", "/artifacts/kernel"]) assert.equal(await status(`${runs}/${id}${tail}`), 404, `${id}${tail}`);
      assert.equal(await status(`${runs}/trigger/${id}`), 404, id);
    }
    for (const name of ["..%2F..%2Fconfigs%2Faudit.yml", "%2e%2e/%2e%2e/configs/audit.yml", "%252e%252e%252fkernel", "..%5C..%5Cx", "%2Fetc%2Fpasswd", "kernel%00.txt", ".%2Fkernel", "kernel/"]) {
      assert.equal(await status(`${runs}/${run.id}/artifacts/${name}`), 404, name);
    }
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", trigger_id: "../../x" } }), 400);
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", trigger_id: 5 } }), 400);

    // Alias explosions: in request overrides, in an uploaded config (stored, refused at use).
    const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]", ...Array.from({ length: 9 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10).fill(`*${String.fromCharCode(97 + i)}`).join(", ")}]`)].join("\n");
    // The request's value makes the config explode once expanded: refused like an invalid config.
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", overrides: `${bomb}\ntests.g.0.sleep.x: *j` } }), 422);
    await uploadConfig(s, "bomb.yml", `${bomb}\ntests:\n  g:\n  - sleep:\n      seconds: *j\n`);
    assert.equal(await status(runs, { method: "POST", json: { config_name: "bomb.yml" } }), 422);
    assert.equal(await status("/api/v1/configs/bomb.yml/override-hints"), 422);
    assert.equal(await status("/api/v1/configs/bomb.yml/test-suites"), 422);

    // Huge overrides: over the JSON limit is 413; just under it is parsed and refused as unmatched.
    const lines = (n: number) => Array.from({ length: n }, (_, i) => `tests.g.0.sleep.p${i}.x: ${i}`).join("\n");
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", overrides: lines(40_000) } }), 413);
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", overrides: lines(3_000) } }), 400);
    // Deeply nested object overrides and JSON: 400, not a stack overflow.
    const deep = (n: number) => "{\"a\":".repeat(n) + "1" + "}".repeat(n);
    const raw = (body: string) => status(runs, { method: "POST", body, headers: { "content-type": "application/json" } });
    assert.equal(await raw(`{"config_name":"audit.yml","overrides":${deep(5000)}}`), 400);
    assert.equal(await raw(`{"config_name":"audit.yml","overrides":{"tests":${deep(200)}}}`), 400);
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", overrides: "x:\n" + "  - ".repeat(1) + "[".repeat(5000) } }), 400);
    // A huge pattern, and a repeat body that is not a string.
    assert.equal(await status(runs, { method: "POST", json: { config_name: "audit.yml", pattern: "not ".repeat(50_000) + "x" } }), 400);
    assert.equal(await status(`${runs}/${run.id}/repeat`, { method: "POST", json: "(".repeat(10_000) }), 400);
    assert.equal(await status(`${runs}/${run.id}/repeat`, { method: "POST", json: ["x"] }), 400);
    assert.equal(await status(`${runs}/${run.id}/repeat`, { method: "POST", body: "x", headers: { "content-type": "text/plain" } }), 415);
    // None of it created a run.
    assert.equal(((await (await s.request(runs, { token: t })).json()) as unknown[]).filter((r) => (r as RunObject).config_name === "bomb.yml").length, 0);
  });

  test("status codes not covered elsewhere: repeat of a config that no longer loads, bad field types (12.8, 12.12)", async () => {
    const t = s.adminToken;
    await uploadConfig(s, "changing.yml", "tests:\n  g:\n  - sleep:\n      seconds: 0\n");
    const done = await waitRun(s, (await trigger(s, { config_name: "changing.yml" })).id);
    await uploadConfig(s, "changing.yml", "tests:\n  g:\n  - frobnicate: {}\n");
    const res = await s.request(`/api/v1/test-runs/${done.id}/repeat`, { method: "POST", json: "", token: t });
    assert.equal(res.status, 422);
    assert.match(((await res.json()) as { error: string }).error, /unknown module 'frobnicate'/);
    for (const body of [{ config_name: "audit.yml", machine_target: 5 }, { config_name: "audit.yml", test_suite_name: ["g"] }, { config_name: "audit.yml", pattern: 1 }, { config_name: ["audit.yml"] }]) {
      const r = await s.request("/api/v1/test-runs", { method: "POST", json: body, token: t });
      assert.equal(r.status, 400, JSON.stringify(body));
      await r.arrayBuffer();
    }
  });

  test("no CORS headers by default, and no preflight answer (1.1 DECISION)", async () => {
    const res = await s.request("/api/v1/test-runs", { token: s.adminToken, headers: { origin: "http://evil.example" } });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    assert.equal(res.headers.get("access-control-allow-origin"), null);
    const preflight = await s.request("/api/v1/configs", { method: "OPTIONS", headers: { origin: "http://evil.example", "access-control-request-method": "POST" } });
    assert.equal(preflight.headers.get("access-control-allow-origin"), null);
    assert.equal(preflight.status, 404);
    await preflight.arrayBuffer();
  });

  test("trigger endpoints: 404 unknown, 400 aborting a final trigger (14)", async () => {
    const t = s.adminToken;
    const unknown = await s.request("/api/v1/test-runs/trigger/no-such-trigger", { token: t });
    assert.equal(unknown.status, 404);
    assert.deepEqual(await unknown.json(), { error: "Trigger not found" });
    assert.equal((await s.request("/api/v1/test-runs/trigger/no-such-trigger", { method: "DELETE", token: t })).status, 404);
    const final = await s.request(`/api/v1/test-runs/trigger/${run.trigger_id}`, { method: "DELETE", token: t });
    assert.equal(final.status, 400);
    assert.match(((await final.json()) as { error: string }).error, /no pending or running/);
    assert.equal((await s.request("/api/v1/test-runs/trigger/no-such-trigger/results", { token: t })).status, 404);
    assert.equal((await s.request(`/api/v1/test-runs/trigger/${run.trigger_id}/results/..%2F..%2Fconfigs%2Faudit.yml`, { token: t })).status, 404);
  });
});

describe("test_server.cors_origins", () => {
  test("listed origins get CORS headers on every test-run route, preflights included; others get none", async () => {
    const ui = "http://ui.lab:8080";
    const s = await startTestServer({ test_server: { cors_origins: [ui] } as never });
    try {
      const preflight = await s.request("/api/v1/test-runs", {
        method: "OPTIONS",
        headers: { origin: ui, "access-control-request-method": "POST", "access-control-request-headers": "authorization,content-type" },
      });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get("access-control-allow-origin"), ui);
      assert.match(preflight.headers.get("access-control-allow-methods") ?? "", /POST/);
      assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /Authorization/i);
      for (const path of ["/api/v1/configs", "/api/v1/test-runs", "/api/v1/test-runs/trigger", "/api/v1/test-nodes", "/api/v1/configs/none.yml"]) {
        const res = await s.request(path, { token: s.adminToken, headers: { origin: ui } });
        await res.arrayBuffer();
        assert.equal(res.headers.get("access-control-allow-origin"), ui, path);
      }
      // Errors carry the header too, so the page can read the message.
      const denied = await s.request("/api/v1/configs", { headers: { origin: ui } });
      assert.equal(denied.status, 401);
      assert.equal(denied.headers.get("access-control-allow-origin"), ui);
      await denied.arrayBuffer();
      const other = await s.request("/api/v1/configs", { token: s.adminToken, headers: { origin: "http://evil.example" } });
      await other.arrayBuffer();
      assert.equal(other.headers.get("access-control-allow-origin"), null);
      // The update server's routes are not opened by this key.
      const health = await s.request("/api/health", { headers: { origin: ui } });
      await health.arrayBuffer();
      assert.equal(health.headers.get("access-control-allow-origin"), null);
    } finally {
      await s.close();
    }
  });

  test("a bad origin is a config error naming the key", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "appliance.config.yaml"), "test_server:\n  cors_origins: ['http://ui.lab/path']\n");
    assert.throws(() => loadConfig({ cwd: dir, env: {} }), /config key test_server\.cors_origins\.0: expected an origin/);
    writeFileSync(join(dir, "appliance.config.yaml"), "test_server:\n  cors_origins: ['*', 'https://ui.lab:8443']\n");
    assert.deepEqual(loadConfig({ cwd: dir, env: {} }).config.test_server.cors_origins, ["*", "https://ui.lab:8443"]);
    removeDir(dir);
  });
});
