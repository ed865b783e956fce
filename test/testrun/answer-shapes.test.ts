/*
 * The answers are exactly the shapes the OpenAPI document shows (src/testrun/schema.ts,
 * src/accounts/schema.ts, src/http/schema.ts): parsing an answer with its schema keeps every field
 * and drops none, so a field the handler sends but the schema lacks, or one the schema requires
 * but the handler leaves out, fails here.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { z } from "zod";
import { Account } from "../../src/accounts/schema.ts";
import { Caller, Health } from "../../src/http/schema.ts";
import {
  Artifact,
  DeviceTestHistory,
  NodeStatus,
  ReportRow,
  ReportSummary,
  TestConfig,
  TestConfigInfo,
  TestNode,
  TestRun,
  TestRunB,
  TestTargets,
  Trigger,
} from "../../src/testrun/schema.ts";
import { exact } from "../helpers/shapes.ts";
import { useTestServer, type TestServer } from "../helpers/server.ts";
import { getRun, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const QUICK = "metadata:\n  kernel: {run: 'uname -s'}\ntests:\n  g:\n  - exec:\n      name: quick\n      command: 'echo hi > out.txt'\n      save_output: out.log\n";
const SLOW = "tests:\n  g:\n  - sleep:\n      seconds: 30\n";

async function answer(server: TestServer, path: string, init: Parameters<TestServer["request"]>[1] = {}): Promise<unknown> {
  const res = await server.request(path, { token: server.adminToken, ...init });
  const text = await res.text();
  assert.ok(res.ok, `${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

describe("Variant A answers are their documented shapes", () => {
  const server = useTestServer({ test_server: { nodes: { node1: { url: "http://127.0.0.1:9" } } } });

  test("configs, runs, triggers, reports, artifacts, nodes, targets and history", async () => {
    await uploadConfig(server, "slow.yml", SLOW);
    const form = new FormData();
    form.append("file", new Blob([QUICK]), "quick.yml");
    exact(TestConfig, await answer(server, "/api/v1/configs", { method: "POST", body: form }), "upload");
    exact(z.array(TestConfig), await answer(server, "/api/v1/configs"), "config list");
    exact(z.array(TestConfig), await answer(server, "/api/v1/configs?details=true"), "config list with sizes");
    exact(TestConfigInfo, await answer(server, "/api/v1/configs/quick.yml"), "one config");

    const started = await trigger(server, { config_name: "quick.yml" });
    exact(TestRun, started, "a started run");
    const run = await waitRun(server, started.id);
    assert.equal(run.status, "finished");
    exact(TestRun, run, "a finished run");
    exact(z.array(TestRun), await answer(server, "/api/v1/test-runs"), "run list");
    exact(z.array(Trigger), await answer(server, "/api/v1/test-runs/trigger"), "trigger list");
    exact(Trigger, await answer(server, `/api/v1/test-runs/trigger/${run.trigger_id}`), "one trigger");
    exact(ReportSummary, await answer(server, `/api/v1/test-runs/${run.id}/report/summary`), "report summary");
    exact(z.array(ReportRow), await answer(server, `/api/v1/test-runs/${run.id}/report?format=json`), "JSON report");
    const artifacts = await answer(server, `/api/v1/test-runs/${run.id}/artifacts`);
    exact(z.array(Artifact), artifacts, "artifact list");
    assert.ok((artifacts as unknown[]).length > 0);
    exact(TestRun, await answer(server, `/api/v1/test-runs/${run.id}/repeat`, { method: "POST", json: "quick" }), "a repeat");

    // A running run being aborted, and one that failed: the optional fields.
    const slow = await trigger(server, { config_name: "slow.yml" });
    await waitRun(server, slow.id, (r) => r.status === "running");
    const aborting = await answer(server, `/api/v1/test-runs/${slow.id}`, { method: "DELETE" });
    exact(TestRun, aborting, "an aborting run");
    exact(TestRun, await waitRun(server, slow.id), "an aborted run");
    const none = await trigger(server, { config_name: "quick.yml", pattern: "nothing_matches" });
    const failed = await waitRun(server, none.id);
    assert.equal(failed.status, "failed");
    exact(TestRun, failed, "a failed run");

    exact(z.array(TestNode), await answer(server, "/api/v1/test-nodes"), "node list");
    exact(z.array(NodeStatus), await answer(server, "/api/v1/test-nodes/status"), "node states");
    exact(TestTargets, await answer(server, "/api/v1/test-targets"), "test targets");
    exact(DeviceTestHistory, await answer(server, "/api/v1/configs/quick.yml/history"), "history");
  });

  test("health, whoami, sign-in and accounts", async () => {
    exact(Health, await answer(server, "/api/health"), "health");
    exact(Caller, await answer(server, "/api/whoami"), "whoami");
    const created = await server.request("/api/v1/users", { method: "POST", token: server.adminToken, json: { name: "tech", password: "a long password", scopes: ["tests_ro"] } });
    assert.equal(created.status, 201);
    exact(Account, await created.json(), "a new account");
    exact(z.array(Account), await answer(server, "/api/v1/users"), "account list");
    exact(Account, await answer(server, "/api/v1/users/tech", { method: "PATCH", json: { disabled: true } }), "a changed account");
    exact(Caller, await answer(server, "/api/v1/auth/login", { method: "POST", token: undefined, json: { username: "admin", password: readFileSync(join(server.dataDir, "admin.password"), "utf8").trim() } }), "sign-in");
  });
});

describe("Variant B answers are their documented shapes", () => {
  const server = useTestServer({ test_server: { api_variant: "B" } });

  test("runs", async () => {
    await uploadConfig(server, "quick.yml", QUICK);
    const res = await server.request("/api/v1/test-runs", { method: "POST", token: server.adminToken, json: { config_name: "quick.yml" } });
    assert.equal(res.status, 200);
    const id = (res.headers.get("location") ?? "").split("/").pop()!;
    exact(TestRunB, await getRun(server, id), "a run");
    exact(TestRunB, await waitRun(server, id), "a finished run");
    exact(z.array(TestRunB), await answer(server, "/api/v1/test-runs"), "run list");
  });
});
