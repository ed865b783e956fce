import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { reportRows, trigger, uploadConfig, waitRun, type RunObject, serverErrors } from "./run-helpers.ts";

const THREE = `
tests:
  g1:
  - simple:
      device: a
  - simple:
      device: skip
  g2:
  - simple:
      device: c
`;

describe("repeat and the pattern language", () => {
  let errors: string[] = [];
  let original: RunObject;
  const names = async (id: string) => (await reportRows(s, id)).map((r) => `${r["test name"]}:${r.status}`);
  const repeat = async (id: string, body: unknown) => {
    const res = await s.request(`/api/v1/test-runs/${id}/repeat`, { method: "POST", json: body, token: s.adminToken });
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as RunObject;
  };

  const s = useTestServer({ test_server: { compat_modules: true } as never }, async (s) => {
    errors = serverErrors(s);
    await uploadConfig(s, "three.yml", THREE);
    original = await waitRun(s, (await trigger(s, { config_name: "three.yml", overrides: "tests.g2.0.simple.device: c2" })).id);
    assert.equal(original.status, "failed");
  });
  after(() => {
    assert.deepEqual(errors, [], "no request was answered 5xx");
  });

  test("repeat with `success or conditional_skip` runs exactly those cases", async () => {
    const again = await repeat(original.id, "success or conditional_skip");
    assert.equal(again.status, "pending");
    assert.notEqual(again.id, original.id);
    assert.equal(again.repeat_of, original.id);
    assert.equal(again.pattern, "success or conditional_skip");
    assert.notEqual(again.trigger_id, original.trigger_id);
    assert.deepEqual(again.overrides, ["tests.g2.0.simple.device: c2"]);
    const done = await waitRun(s, again.id);
    assert.equal(done.status, "finished");
    assert.deepEqual(await names(again.id), [
      "success[test_config0]:passed",
      "conditional_skip[test_config0]:passed",
      "success[test_config1]:passed",
      "conditional_skip[test_config1]:skipped",
      "success[test_config2]:passed",
      "conditional_skip[test_config2]:passed",
    ]);
    assert.equal((await reportRows(s, again.id))[4]["device name"], "simple(c2)");

    // An empty or null body keeps the repeated run's own pattern.
    const third = await waitRun(s, (await repeat(again.id, null)).id);
    assert.equal(third.pattern, "success or conditional_skip");
    assert.equal((await names(third.id)).length, 6);
    const whole = await waitRun(s, (await repeat(original.id, "")).id);
    assert.equal(whole.pattern, "");
    assert.equal((await names(whole.id)).length, 15);
  });

  test("the observed selections of section 10.3", async () => {
    const select = async (pattern: string) => {
      const run = await waitRun(s, (await trigger(s, { config_name: "three.yml", pattern })).id);
      return { run, rows: (await reportRows(s, run.id)).map((r) => r["test name"]) };
    };
    assert.deepEqual((await select("success[test_config0]")).rows, ["success[test_config0]"]);
    assert.deepEqual((await select("SUCCESS")).rows, ["success[test_config0]", "success[test_config1]", "success[test_config2]"]);
    assert.deepEqual((await select("test_config1")).rows, [
      "success[test_config1]",
      "failure[test_config1]",
      "conditional_skip[test_config1]",
      "record_artifact[test_config1]",
      "configure_runs_once[test_config1]",
    ]);
    assert.equal((await select("not failure")).rows.length, 12);
    assert.deepEqual((await select("(success or failure) and not test_config1")).rows, [
      "success[test_config0]",
      "failure[test_config0]",
      "success[test_config2]",
      "failure[test_config2]",
    ]);
    assert.deepEqual((await select("conditional_skip and test_config1")).rows, ["conditional_skip[test_config1]"]);
    for (const all of ["TestSimple", "test.py", "simple"]) assert.equal((await select(all)).rows.length, 15, all);

    const none = await select("nomatch");
    assert.equal(none.run.status, "failed");
    assert.equal(none.run.error, "no test case matches the pattern");
    assert.deepEqual(none.rows, []);
    const csv = await (await s.request(`/api/v1/test-runs/${none.run.id}/report`, { token: s.adminToken })).text();
    assert.equal(csv, "device name,test name,module,duration,message,status\r\n");
  });

  test("patterns are validated on arrival; a deleted config cannot be repeated", async () => {
    for (const bad of ["and", "success or", "(success", "not", "success)", "a = b", "(".repeat(1000) + "x" + ")".repeat(1000), "not ".repeat(500) + "x", "x or ".repeat(1000) + "x"]) {
      const res = await s.request(`/api/v1/test-runs/${original.id}/repeat`, { method: "POST", json: bad, token: s.adminToken });
      assert.equal(res.status, 400, bad.slice(0, 20));
      assert.match(((await res.json()) as { error: string }).error, /^invalid pattern: /);
    }
    for (const body of [{ pattern: "x" }, 5, ["x"]]) {
      const res = await s.request(`/api/v1/test-runs/${original.id}/repeat`, { method: "POST", json: body, token: s.adminToken });
      assert.equal(res.status, 400);
    }
    await uploadConfig(s, "gone.yml", "tests:\n  g:\n  - sleep:\n      seconds: 0\n");
    const run = await waitRun(s, (await trigger(s, { config_name: "gone.yml" })).id);
    await s.request("/api/v1/configs/gone.yml", { method: "DELETE", token: s.adminToken });
    const res = await s.request(`/api/v1/test-runs/${run.id}/repeat`, { method: "POST", json: "", token: s.adminToken });
    assert.equal(res.status, 404);
    assert.deepEqual(await res.json(), { error: "Configuration file not found" });
  });
});
