import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { startTestServer } from "../helpers/server.ts";
import { trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const CONFIG = "tests:\n  g:\n  - sleep:\n      seconds: 0\n";

describe("run endpoints: authorization", () => {
  test("reads need svc_tests_ro, writes svc_tests_rw (admin scopes imply them); 401 without a token", async () => {
    const s = await startTestServer();
    try {
      await uploadConfig(s, "a.yml", CONFIG);
      const run = await waitRun(s, (await trigger(s, { config_name: "a.yml" })).id);
      const ro = s.token(["tests_ro"]);
      const rw = s.token(["tests_rw"]);
      const adminRo = s.token(["admin_ro"]);
      const other = s.token(["upload_single_file"]);
      const reads = ["/api/v1/test-runs", `/api/v1/test-runs/${run.id}`, `/api/v1/test-runs/${run.id}/report`, `/api/v1/test-runs/${run.id}/artifacts`, "/api/v1/test-runs/trigger", "/api/v1/test-nodes"];
      for (const path of reads) {
        const anon = await s.request(path);
        assert.equal(anon.status, 401, path);
        assert.equal(typeof ((await anon.json()) as { error: string }).error, "string");
        assert.equal((await s.request(path, { token: "garbage" })).status, 401, path);
        assert.equal((await s.request(path, { token: other })).status, 403, path);
        for (const token of [ro, rw, adminRo, s.adminToken]) {
          const res = await s.request(path, { token });
          assert.equal(res.status, 200, path);
          await res.arrayBuffer();
        }
      }
      const writes: [string, string, unknown][] = [
        ["POST", "/api/v1/test-runs", { config_name: "a.yml" }],
        ["POST", `/api/v1/test-runs/${run.id}/repeat`, ""],
        ["DELETE", `/api/v1/test-runs/${run.id}`, undefined],
      ];
      for (const [method, path, json] of writes) {
        assert.equal((await s.request(path, { method, json })).status, 401, path);
        assert.equal((await s.request(path, { method, json, token: ro })).status, 403, path);
        assert.equal((await s.request(path, { method, json, token: adminRo })).status, 403, path);
      }
      const created = await trigger(s, { config_name: "a.yml" }, rw);
      assert.equal(created.status, "pending");
      await waitRun(s, created.id);
      assert.equal((await s.request(`/api/v1/test-runs/${created.id}/repeat`, { method: "POST", json: "", token: rw })).status, 200);
    } finally {
      await s.close();
    }
  });

  test("test_server.auth: none needs no token", async () => {
    const s = await startTestServer({ test_server: { auth: "none" } as never });
    try {
      const form = new FormData();
      form.append("file", new Blob([CONFIG]), "a.yml");
      assert.equal((await s.request("/api/v1/configs", { method: "POST", body: form })).status, 200);
      const res = await s.request("/api/v1/test-runs", { method: "POST", json: { config_name: "a.yml" } });
      assert.equal(res.status, 200);
      const { id } = (await res.json()) as { id: string };
      assert.equal((await waitRun(s, id)).status, "finished");
      const report = await s.request(`/api/v1/test-runs/${id}/report?format=json`);
      assert.equal(report.status, 200);
      assert.equal(((await report.json()) as unknown[]).length, 1);
      // Repeated slashes (protoplaster's manager CLI) are served as one.
      assert.equal((await s.request(`//api/v1/test-runs/${id}`)).status, 200);
    } finally {
      await s.close();
    }
  });
});
