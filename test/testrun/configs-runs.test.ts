// Black-box: what the config layer means for a run, seen over HTTP through the report (the
// compat module `simple` puts its `device` param into the report's device name). Includes,
// anchors across files, each override placement, request overrides of both forms, suites,
// and the config errors of a trigger (test-run-server.md 2 to 5, 12.8, 13).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { type TestServer, useTestServer } from "../helpers/server.ts";
import { reportRows, trigger, uploadConfig, waitRun, serverErrors } from "./run-helpers.ts";

/** The device of each entry of a finished run, in execution order (one per parameter id). */
async function devicesOf(server: TestServer, body: Record<string, unknown>): Promise<string[]> {
  const run = await trigger(server, { ...body, pattern: "success" });
  const done = await waitRun(server, run.id);
  assert.ok(done.status === "finished" || done.status === "failed", JSON.stringify(done));
  return (await reportRows(server, run.id)).map((row) => row["device name"].replace(/^simple\((.*)\)$/, "$1"));
}

async function triggerError(server: TestServer, body: Record<string, unknown>, status: number, pattern: RegExp): Promise<void> {
  const response = await server.request("/api/v1/test-runs", { method: "POST", json: body, token: server.adminToken });
  const answer = (await response.json()) as { error?: string };
  assert.equal(response.status, status, JSON.stringify(answer));
  assert.match(answer.error ?? "", pattern);
}

const FILES: Record<string, string> = {
  // Includes nest (a -> b), included groups run first; anchors of the includer reach includes.
  "main.yml": `includes: [inc-a.yml, inc-c.yml]
shared: &shared {device: main-anchor}
tests:
  main:
    - simple: {device: main}
`,
  "inc-a.yml": "includes: [inc-b.yml]\ntests:\n  a:\n    - simple: *shared\n",
  "inc-b.yml": "sibling: &sibling {device: from-b}\ntests:\n  b:\n    - simple: {device: b}\n",
  "inc-c.yml": "tests:\n  c:\n    - simple:\n        <<: *sibling\n",

  // Every in-file placement of 3.2 and the anchor effects of 3.5.
  "placements.yml": `includes: [placements-inc.yml]
tests.000.0.simple.device: at-root
conf_simple.device: applied-in-include
tests:
  000:
    - simple: {device: x}
    - simple: {device: x}
    - simple:
        device: x
      simple.device: beside-module
    - simple:
        device: x
        nested: {name: x}
        nested.name: inside-params
  001.0.simple.device: inside-tests
  001:
    - simple: {device: x}
`,
  "placements-inc.yml": "conf_simple: &predefined {device: default}\ntests:\n  inc:\n    - simple: *predefined\n    - simple:\n        <<: *predefined\n",

  "suites.yml": `tests:
  g1: [{simple: {device: g1}}]
  g2: [{simple: {device: g2}}]
  g3: [{simple: {device: g3}}]
test-suites:
  A: {tests: [B, g1]}
  B: {tests: [g2]}
  outer: {tests: [A, g3, A]}
`,
  "cyclic-a.yml": "includes: [cyclic-b.yml]\n",
  "cyclic-b.yml": "includes: [cyclic-a.yml]\n",
  "missing-include.yml": "includes: [not-uploaded.yml]\ntests: {g: [{simple: {}}]}\n",
  "bad-entry.yml": "tests:\n  g:\n    - simple: {}\n      override: device\n",
};

describe("config semantics seen through runs", () => {
  let errors: string[] = [];
  const server = useTestServer({ test_server: { compat_modules: true } }, async (server) => {
    errors = serverErrors(server);
    for (const [name, text] of Object.entries(FILES)) await uploadConfig(server, name, text);
  });
  after(() => assert.deepEqual(errors, [], "no request was answered 5xx"));

  test("nested includes run first and share anchors across files", async () => {
    assert.deepEqual(await devicesOf(server, { config_name: "main.yml" }), ["b", "main-anchor", "from-b", "main"]);
  });

  test("each in-file override placement reaches its entry", async () => {
    // inc.0 (alias: sees the root override applied in the include), inc.1 (merge copy made when
    // the include was parsed, before its overrides: keeps the old value, 3.5), then 000 and 001.
    assert.deepEqual(await devicesOf(server, { config_name: "placements.yml" }), [
      "applied-in-include",
      "default",
      "at-root",
      "x",
      "beside-module",
      "x",
      "inside-tests",
    ]);
  });

  test("Variant A string overrides win over in-file ones and reach included files", async () => {
    const devices = await devicesOf(server, {
      config_name: "placements.yml",
      overrides: "tests.000.0.simple.device: from-request\ntests.inc.1.simple.device: into-include",
    });
    assert.deepEqual(devices, ["applied-in-include", "into-include", "from-request", "x", "beside-module", "x", "inside-tests"]);
    const run = await trigger(server, { config_name: "main.yml", overrides: "tests.main.0.simple.device: v\ntests.main.0.simple.extra: 1" });
    assert.deepEqual(run.overrides, ["tests.main.0.simple.device: v", "tests.main.0.simple.extra: 1"]);
    await waitRun(server, run.id);
  });

  test("object overrides deep-merge into the effective config (also accepted by Variant A)", async () => {
    const devices = await devicesOf(server, { config_name: "suites.yml", overrides: { tests: { g1: { "0": { simple: { device: "merged" } } }, g4: [{ simple: { device: "added" } }] } } });
    assert.deepEqual(devices, ["merged", "g2", "g3", "added"]);
  });

  test("suites: nested, forward references, first occurrence wins; a group name selects that group", async () => {
    assert.deepEqual(await devicesOf(server, { config_name: "suites.yml", test_suite_name: "A" }), ["g2", "g1"]);
    assert.deepEqual(await devicesOf(server, { config_name: "suites.yml", test_suite_name: "outer" }), ["g2", "g1", "g3"]);
    assert.deepEqual(await devicesOf(server, { config_name: "suites.yml", test_suite_name: "g3" }), ["g3"]);
  });

  test("trigger errors: missing config 404, bad name 400, unknown suite 404, config that does not load 422, bad overrides 400", async () => {
    await triggerError(server, { config_name: "nope.yml" }, 404, /^Configuration file not found$/);
    await triggerError(server, { config_name: "../main.yml" }, 400, /invalid config name/);
    await triggerError(server, { config_name: "suites.yml", test_suite_name: "nothing" }, 404, /^Unknown test suite or test group: nothing$/);
    await triggerError(server, { config_name: "cyclic-a.yml" }, 422, /include cycle: cyclic-a\.yml -> cyclic-b\.yml -> cyclic-a\.yml/);
    await triggerError(server, { config_name: "missing-include.yml" }, 422, /not-uploaded\.yml' not found/);
    await triggerError(server, { config_name: "bad-entry.yml" }, 422, /tests\.g\.0/);
    await triggerError(server, { config_name: "suites.yml", overrides: "a: [1" }, 400, /^invalid overrides: /);
    await triggerError(server, { config_name: "suites.yml", overrides: "tests.nope.0.simple.device: x" }, 400, /matches nothing/);
    await triggerError(server, { config_name: "suites.yml", overrides: { tests: { g1: { "7": { simple: {} } } } } }, 400, /out of range/);
  });
});

describe("Variant B: object overrides", () => {
  let errors: string[] = [];
  const server = useTestServer({ test_server: { compat_modules: true, api_variant: "B" } }, async (server) => {
    errors = serverErrors(server);
    await uploadConfig(server, "suites.yml", FILES["suites.yml"]);
  });
  after(() => assert.deepEqual(errors, [], "no request was answered 5xx"));

  test("a deep-merged object override changes the run; a missing config is 400 in B", async () => {
    const response = await server.request("/api/v1/test-runs", { method: "POST", json: { config_name: "suites.yml", overrides: { tests: { g2: { "0": { simple: { device: "via-b" } } } } } }, token: server.adminToken });
    assert.equal(response.status, 200, await response.clone().text());
    const runs = (await (await server.request("/api/v1/test-runs", { token: server.adminToken })).json()) as Array<{ run_id: number }>;
    const id = runs[runs.length - 1].run_id;
    await waitRun(server, id);
    const csv = await (await server.request(`/api/v1/test-runs/${id}/report`, { token: server.adminToken })).text();
    assert.match(csv, /simple\(via-b\)/);
    assert.doesNotMatch(csv, /simple\(g2\)/);
    const missing = await server.request("/api/v1/test-runs", { method: "POST", json: { config_name: "nope.yml" }, token: server.adminToken });
    assert.equal(missing.status, 400);
  });
});
