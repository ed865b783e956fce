import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { uploadConfig, waitRun, serverErrors } from "./run-helpers.ts";

describe("test runs, Variant B", () => {
  let errors: string[] = [];
  const req = (path: string, init: RequestInit & { json?: unknown } = {}) => s.request(path, { ...init, token: s.adminToken });

  const s = useTestServer({ test_server: { api_variant: "B", compat_modules: true } as never }, async (s) => {
    errors = serverErrors(s);
    await uploadConfig(s, "b.yml", "tests:\n  g:\n  - simple:\n      device: a\n");
    await uploadConfig(s, "slow.yml", "tests:\n  g:\n  - sleep:\n      seconds: 30\n");
  });
  after(() => {
    assert.deepEqual(errors, [], "no request was answered 5xx");
  });

  test("trigger with object overrides, integer ids, created/completed, CSV report", async () => {
    const res = await req("/api/v1/test-runs", { method: "POST", json: { config_name: "b.yml", overrides: { tests: { g: { "0": { simple: { device: "patched" } } } } } } });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "");
    const location = res.headers.get("location")!;
    assert.match(location, /^\/api\/v1\/test-runs\/\d+$/);
    const id = Number(location.split("/").pop());
    assert.ok(id >= 1);

    const list = (await (await req("/api/v1/test-runs")).json()) as Record<string, unknown>[];
    const mine = list.find((r) => r.run_id === id)!;
    assert.equal(mine.id, id);
    assert.equal(mine.config_name, "b.yml");
    assert.match(String(mine.created), / \+0000$/);

    const done = await waitRun(s, id);
    assert.equal(done.status, "failed");
    assert.equal(done.run_id, id);
    assert.match(String(done.completed), / \+0000$/);
    assert.equal("started_at" in done, false);

    const report = await req(`/api/v1/test-runs/${id}/report`);
    assert.equal(report.status, 200);
    assert.equal(report.headers.get("content-type"), "text/csv; charset=utf-8");
    assert.equal(report.headers.get("content-disposition"), `attachment; filename=report-run-${id}.csv`);
    const lines = (await report.text()).split("\r\n");
    assert.equal(lines[0], "device name,test name,module,duration,message,status");
    assert.match(lines[1], /^simple\(patched\),success\[test_config0\],/);

    // The next run gets the next integer.
    const second = await req("/api/v1/test-runs", { method: "POST", json: { config_name: "b.yml" } });
    assert.equal(second.headers.get("location"), `/api/v1/test-runs/${id + 1}`);
    await waitRun(s, id + 1);
  });

  test("status codes", async () => {
    const expect = async (res: Promise<Response>, status: number, match?: RegExp) => {
      const r = await res;
      const text = await r.text();
      assert.equal(r.status, status, text);
      if (status >= 400) assert.equal(typeof (JSON.parse(text) as { error: string }).error, "string");
      if (match) assert.match(text, match);
    };
    await expect(req("/api/v1/test-runs", { method: "POST", json: { config_name: "missing.yml" } }), 400, /Configuration file not found/);
    await expect(req("/api/v1/test-runs", { method: "POST", json: { config_name: "b.yml", overrides: "tests.g.0.simple.device: x" } }), 400, /invalid overrides/);
    await expect(req("/api/v1/test-runs", { method: "POST", json: { config_name: "b.yml", overrides: { tests: { g: { "5": { simple: {} } } } } } }), 400, /invalid overrides/);
    await expect(req("/api/v1/test-runs", { method: "POST", json: { overrides: {} } }), 400);
    await expect(req("/api/v1/test-runs", { method: "POST", body: "nope", headers: { "content-type": "application/json" } }), 400);
    await expect(req("/api/v1/test-runs/999999"), 404);
    await expect(req("/api/v1/test-runs/abc"), 404);
    await expect(req("/api/v1/test-runs/0"), 404);
    await expect(req("/api/v1/test-runs/1.5/report"), 404);
    await expect(req("/api/v1/test-runs/999999", { method: "DELETE" }), 404);
    await expect(req("/api/v1/test-runs/1", { method: "DELETE" }), 400, /not in progress/);
    // Variant A only.
    await expect(req("/api/v1/test-runs/1/artifacts"), 404);
    await expect(req("/api/v1/test-runs/1/repeat", { method: "POST", json: "" }), 404);
    await expect(req("/api/v1/test-runs/trigger"), 404);
    await expect(req("/api/v1/configs/b.yml/test-suites"), 404);
    await expect(req("/api/v1/configs/b.yml/override-hints"), 404);
    await expect(req("/api/v1/configs/b.yml"), 200);
    // Every B route needs a token; read-only tokens cannot write.
    const ro = s.token(["tests_ro"]);
    for (const [method, path] of [["GET", "/api/v1/test-runs"], ["POST", "/api/v1/test-runs"], ["GET", "/api/v1/test-runs/1"], ["DELETE", "/api/v1/test-runs/1"], ["GET", "/api/v1/test-runs/1/report"]]) {
      await expect(s.request(path, { method, ...(method === "POST" ? { json: { config_name: "b.yml" } } : {}) }), 401);
      if (method !== "GET") await expect(s.request(path, { method, token: ro, ...(method === "POST" ? { json: { config_name: "b.yml" } } : {}) }), 403);
    }

    const res = await req("/api/v1/test-runs", { method: "POST", json: { config_name: "slow.yml" } });
    const id = Number(res.headers.get("location")!.split("/").pop());
    await waitRun(s, id, (r) => r.status === "running");
    await expect(req(`/api/v1/test-runs/${id}/report`), 404, /not finished/);
    const del = await req(`/api/v1/test-runs/${id}`, { method: "DELETE" });
    assert.equal(del.status, 200);
    const body = (await del.json()) as Record<string, unknown>;
    assert.equal(body.run_id, id);
    assert.equal(body.status, "aborted");
    assert.match(String(body.completed), / \+0000$/);
  });
});
