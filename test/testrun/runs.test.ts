import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { getRun, reportRows, statuses, trigger, uploadConfig, waitRun, serverErrors } from "./run-helpers.ts";

const MIXED = `
tests:
  g:
  - simple:
      device: a
  - simple:
      device: skip
metadata:
  greeting:
    run: printf 'hello\\nworld\\n'
`;

const PASSING = `
tests:
  ok:
  - exec:
      command: [sh, -c, "echo ready"]
      stdout_contains: ready
  - sleep:
      seconds: 0.05
  other:
  - exec:
      name: second
      command: "true"
test-suites:
  only_ok:
    tests: [ok]
`;

const SLEEPY = `
tests:
  g:
  - sleep:
      seconds: 30
`;

describe("test runs, Variant A", () => {
  let errors: string[] = [];
  const s = useTestServer({ test_server: { compat_modules: true } as never }, async (s) => {
    errors = serverErrors(s);
    await uploadConfig(s, "mixed.yml", MIXED);
    await uploadConfig(s, "passing.yml", PASSING);
    await uploadConfig(s, "sleepy.yml", SLEEPY);
  });
  after(() => {
    assert.deepEqual(errors, [], "no request was answered 5xx");
  });

  test("passing, failing and skipped cases end failed with the right CSV and JSON rows", async () => {
    const created = await trigger(s, { config_name: "mixed.yml" });
    assert.equal(created.status, "pending");
    assert.equal(created.started_at, "");
    assert.equal(created.finished_at, "");
    assert.deepEqual(created.metadata, {});
    assert.match(created.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.match(String(created.created_at), /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d \+0000$/);

    const run = await waitRun(s, created.id);
    assert.equal(run.status, "failed");
    assert.equal(run.error, undefined);
    assert.deepEqual(run.metadata, { greeting: "hello\nworld" });
    assert.notEqual(run.started_at, "");
    assert.notEqual(run.finished_at, "");

    const res = await s.request(`/api/v1/test-runs/${run.id}/report`, { token: s.adminToken });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/csv; charset=utf-8");
    assert.equal(res.headers.get("content-disposition"), `attachment; filename=${run.id}.csv`);
    const csv = await res.text();
    const lines = csv.split("\r\n");
    assert.equal(lines[0], "device name,test name,module,duration,message,status");
    assert.equal(lines.length, 12); // header, 10 rows, trailing empty string after the last CRLF
    assert.match(lines[2], /^simple\(a\),failure\[test_config0\],test\.py::TestSimple::test_failure\[test_config0\],[0-9.e-]+,assert False,failed$/);
    assert.match(lines[8], /^simple\(skip\),conditional_skip\[test_config1\],test\.py::TestSimple::test_conditional_skip\[test_config1\],[0-9.e-]+,Skipped,skipped$/);

    const rows = await reportRows(s, run.id);
    assert.equal(rows.length, 10);
    for (const row of rows) {
      assert.deepEqual(Object.keys(row), ["device name", "test name", "module", "duration", "message", "status"]);
      assert.equal(typeof row.duration, "string");
      assert.ok(Number.isFinite(Number(row.duration)));
    }
    assert.deepEqual(statuses(rows), {
      "success[test_config0]": "passed",
      "failure[test_config0]": "failed",
      "conditional_skip[test_config0]": "passed",
      "record_artifact[test_config0]": "passed",
      "configure_runs_once[test_config0]": "passed",
      "success[test_config1]": "passed",
      "failure[test_config1]": "failed",
      "conditional_skip[test_config1]": "skipped",
      "record_artifact[test_config1]": "passed",
      "configure_runs_once[test_config1]": "passed",
    });
    assert.equal(rows[0]["device name"], "simple(a)");
    assert.equal(rows[0].message, "");
  });

  test("a run of only passing cases ends finished; a suite selects its groups", async () => {
    const all = await waitRun(s, (await trigger(s, { config_name: "passing.yml" })).id);
    assert.equal(all.status, "finished");
    assert.deepEqual(
      (await reportRows(s, all.id)).map((r) => [r["device name"], r["test name"], r.status]),
      [
        ["exec(sh)", "exit_code[test_config0]", "passed"],
        ["exec(sh)", "stdout[test_config0]", "passed"],
        ["Sleep Test", "sleep[test_config0]", "passed"],
        ["second", "exit_code[test_config1]", "passed"],
      ],
    );
    const suite = await waitRun(s, (await trigger(s, { config_name: "passing.yml", test_suite_name: "only_ok" })).id);
    assert.equal(suite.status, "finished");
    assert.equal(suite.test_suite_name, "only_ok");
    assert.equal((await reportRows(s, suite.id)).length, 3);
    const group = await waitRun(s, (await trigger(s, { config_name: "passing.yml", test_suite_name: "other" })).id);
    assert.deepEqual((await reportRows(s, group.id)).map((r) => r["device name"]), ["second"]);
  });

  test("request overrides reach the entry and are kept on the run", async () => {
    const run = await trigger(s, { config_name: "mixed.yml", overrides: "tests.g.0.simple.device: skip\ntests.g.1.simple.device: b" });
    assert.deepEqual(run.overrides, ["tests.g.0.simple.device: skip", "tests.g.1.simple.device: b"]);
    const done = await waitRun(s, run.id);
    const rows = await reportRows(s, done.id);
    assert.equal(rows[0]["device name"], "simple(skip)");
    assert.equal(rows[5]["device name"], "simple(b)");
  });

  test("one run at a time, FIFO; pending means queued; listing is oldest first", async () => {
    const first = await trigger(s, { config_name: "sleepy.yml", overrides: "tests.g.0.sleep.seconds: 0.4" });
    const second = await trigger(s, { config_name: "passing.yml" });
    await waitRun(s, first.id, (r) => r.status === "running");
    assert.equal((await getRun(s, second.id)).status, "pending");
    const a = await waitRun(s, first.id);
    const b = await waitRun(s, second.id);
    assert.equal(a.status, "finished");
    assert.equal(b.status, "finished");
    assert.ok(Date.parse(String(b.started_at)) >= Date.parse(String(a.finished_at)));
    const list = (await (await s.request("/api/v1/test-runs", { token: s.adminToken })).json()) as { id: string }[];
    const ids = list.map((r) => r.id);
    assert.ok(ids.indexOf(first.id) < ids.indexOf(second.id));
    assert.equal(ids[ids.length - 1], second.id);
  });

  test("abort of a pending run and of a running sleep", async () => {
    const running = await trigger(s, { config_name: "sleepy.yml" });
    const pending = await trigger(s, { config_name: "sleepy.yml" });
    await waitRun(s, running.id, (r) => r.status === "running");
    // Let the sleep case begin: an abort before any case started would leave no row at all.
    await new Promise((r) => setTimeout(r, 200));

    const abortedPending = await s.request(`/api/v1/test-runs/${pending.id}`, { method: "DELETE", token: s.adminToken });
    assert.equal(abortedPending.status, 200);
    const p = (await abortedPending.json()) as Record<string, unknown>;
    assert.equal(p.status, "aborted");
    assert.equal(p.started_at, "");
    assert.notEqual(p.finished_at, "");

    const res = await s.request(`/api/v1/test-runs/${running.id}`, { method: "DELETE", token: s.adminToken });
    assert.equal(res.status, 200);
    const r = await waitRun(s, running.id);
    assert.equal(r.status, "aborted");
    assert.equal(r.abort_requested, true);
    const rows = await reportRows(s, running.id);
    assert.deepEqual(
      rows.map((x) => [x["test name"], x.status, x.message]),
      [["sleep[test_config0]", "skipped", "Aborted by user"]],
    );
    // A run aborted while pending has no report; a final run cannot be aborted again.
    assert.equal((await s.request(`/api/v1/test-runs/${pending.id}/report`, { token: s.adminToken })).status, 404);
    const again = await s.request(`/api/v1/test-runs/${running.id}`, { method: "DELETE", token: s.adminToken });
    assert.equal(again.status, 400);
    assert.deepEqual(await again.json(), { error: "Test run not pending or running" });
  });

  test("status codes of the run endpoints", async () => {
    const t = s.adminToken;
    const post = (body: unknown, headers: Record<string, string> = { "content-type": "application/json" }) =>
      s.request("/api/v1/test-runs", { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body), headers, token: t });
    const expect = async (res: Response | Promise<Response>, status: number, match?: RegExp) => {
      const r = await res;
      const body = (await r.json()) as { error?: string };
      assert.equal(r.status, status, JSON.stringify(body));
      if (status >= 400) assert.equal(typeof body.error, "string");
      if (match) assert.match(body.error ?? "", match);
    };
    await expect(post("{not json"), 400);
    await expect(post({ config_name: "mixed.yml" }, { "content-type": "text/plain" }), 415);
    await expect(post({}), 400, /config_name/);
    await expect(post({ config_name: 5 }), 400);
    await expect(post({ config_name: "../etc/passwd.yml" }), 400, /invalid config name/);
    await expect(post({ config_name: "missing.yml" }), 404, /Configuration file not found/);
    await expect(post({ config_name: "mixed.yml", test_suite_name: "nope" }), 404, /Unknown test suite or test group: nope/);
    await expect(post({ config_name: "mixed.yml", overrides: ["x"] }), 400, /invalid overrides/);
    await expect(post({ config_name: "mixed.yml", overrides: "- a\n- b" }), 400, /invalid overrides/);
    await expect(post({ config_name: "mixed.yml", overrides: "tests.g.9.simple.device: x" }), 400, /matches nothing/);
    await expect(post({ config_name: "mixed.yml", pattern: "and" }), 400, /invalid pattern/);
    await expect(post({ config_name: "mixed.yml", pattern: "(success" }), 400, /invalid pattern/);

    await uploadConfig(s, "bad-module.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n  - frobnicate:\n      x: 1\n");
    await expect(post({ config_name: "bad-module.yml" }), 422, /tests\.g\.1.*unknown module 'frobnicate'/);
    await uploadConfig(s, "bad-param.yml", "tests:\n  g:\n  - exec:\n      timeout: 3\n");
    await expect(post({ config_name: "bad-param.yml" }), 422, /tests\.g\.0.*exec.*'command' is required/);
    await uploadConfig(s, "bad-regex.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n      stdout_regex: '('\n");
    await expect(post({ config_name: "bad-regex.yml" }), 422, /stdout_regex/);
    await uploadConfig(s, "bad-metadata.yml", "tests:\n  g:\n  - sleep:\nmetadata:\n  x:\n    summary: no run\n");
    await expect(post({ config_name: "bad-metadata.yml" }), 422);
    const before = ((await (await s.request("/api/v1/test-runs", { token: t })).json()) as unknown[]).length;
    await expect(post({ config_name: "bad-module.yml" }), 422);
    assert.equal(((await (await s.request("/api/v1/test-runs", { token: t })).json()) as unknown[]).length, before, "a refused trigger creates nothing");

    const unknown = "00000000-0000-4000-8000-000000000000";
    await expect(s.request(`/api/v1/test-runs/${unknown}`, { token: t }), 404, /Run not found/);
    await expect(s.request(`/api/v1/test-runs/${unknown}`, { method: "DELETE", token: t }), 404, /Test run not found/);
    await expect(s.request(`/api/v1/test-runs/${unknown}/report`, { token: t }), 404, /Test run not found/);
    await expect(s.request(`/api/v1/test-runs/${unknown}/artifacts`, { token: t }), 404, /Test run not found/);
    await expect(s.request(`/api/v1/test-runs/${unknown}/artifacts/x.txt`, { token: t }), 404);
    await expect(s.request(`/api/v1/test-runs/${unknown}/repeat`, { method: "POST", json: "", token: t }), 404, /Run not found/);

    const running = await trigger(s, { config_name: "sleepy.yml" });
    await waitRun(s, running.id, (r) => r.status === "running");
    await expect(s.request(`/api/v1/test-runs/${running.id}/report`, { token: t }), 404, /Test run not finished/);
    await expect(s.request(`/api/v1/test-runs/${running.id}/report?format=json`, { token: t }), 404, /Test run not finished/);
    await expect(s.request(`/api/v1/test-runs/${running.id}/artifacts`, { token: t }), 404, /Test run not finished/);
    await expect(s.request(`/api/v1/test-runs/${running.id}/repeat`, { method: "POST", json: { p: 1 }, token: t }), 400);
    await expect(s.request(`/api/v1/test-runs/${running.id}/repeat`, { method: "POST", json: "and or", token: t }), 400, /invalid pattern/);
    await expect(s.request(`/api/v1/test-runs/${running.id}`, { method: "DELETE", token: t }), 200);
    await waitRun(s, running.id);
  });

  test("metadata failure fails the run before any case, with an error", async () => {
    await uploadConfig(s, "meta-fail.yml", "tests:\n  g:\n  - sleep:\n      seconds: 0\nmetadata:\n  broken:\n    run: exit 7\n");
    const run = await waitRun(s, (await trigger(s, { config_name: "meta-fail.yml" })).id);
    assert.equal(run.status, "failed");
    assert.equal(run.error, "metadata command 'broken' failed: exit status 7");
    assert.deepEqual(await reportRows(s, run.id), []);

    await uploadConfig(s, "meta-onfail.yml", "tests:\n  g:\n  - sleep:\n      seconds: 0\nmetadata:\n  first:\n    run: exit 1\n    on-fail:\n      run: echo fallback\n      output: first.out\n");
    const ok = await waitRun(s, (await trigger(s, { config_name: "meta-onfail.yml" })).id);
    assert.equal(ok.status, "finished");
    assert.deepEqual(ok.metadata, { first: "fallback" });
  });

  test("the config is snapshotted at trigger time", async () => {
    await uploadConfig(s, "snap-inc.yml", "tests:\n  inc:\n  - exec:\n      name: from-include\n      command: 'true'\n");
    await uploadConfig(s, "snap.yml", "includes: [snap-inc.yml]\ntests:\n  g:\n  - exec:\n      name: original\n      command: 'true'\n");
    const blocker = await trigger(s, { config_name: "sleepy.yml", overrides: "tests.g.0.sleep.seconds: 0.3" });
    const run = await trigger(s, { config_name: "snap.yml" });
    assert.equal(run.status, "pending");
    await uploadConfig(s, "snap.yml", "tests:\n  g:\n  - exec:\n      name: changed\n      command: 'false'\n");
    const del = await s.request("/api/v1/configs/snap-inc.yml", { method: "DELETE", token: s.adminToken });
    assert.equal(del.status, 200);
    await waitRun(s, blocker.id);
    const done = await waitRun(s, run.id);
    assert.equal(done.status, "finished");
    assert.deepEqual((await reportRows(s, run.id)).map((r) => r["device name"]), ["from-include", "original"]);
  });
});

describe("runner rules", () => {
  let errors: string[] = [];
  const s = useTestServer({ test_server: { compat_modules: true, metadata_timeout: 1 } as never }, async (s) => {
    errors = serverErrors(s);
  });
  after(() => {
    assert.deepEqual(errors, [], "no request was answered 5xx");
  });

  test("a set-up failure fails every case of the entry with its message; unknown params are warnings", async () => {
    await uploadConfig(s, "setup.yml", "tests:\n  g:\n  - extended_simple:\n      skipped_devices: [x]\n  - exec:\n      command: 'true'\n      colour: blue\n");
    const run = await waitRun(s, (await trigger(s, { config_name: "setup.yml" })).id);
    assert.equal(run.status, "failed");
    assert.deepEqual(run.warnings, ["tests.g.1.exec: unknown parameter 'colour' ignored"]);
    const rows = await reportRows(s, run.id);
    assert.deepEqual(
      rows.map((r) => [r["device name"], r["test name"], r.status, r.message]),
      [
        ...["conditional_skip", "success", "failure", "record_artifact", "configure_runs_once"].map((c) => [
          "extended_simple(None)",
          `${c}[test_config0]`,
          "failed",
          "AssertionError: 'device' is an obligatory argument",
        ]),
        ["exec(true)", "exit_code[test_config0]", "passed", ""],
      ],
    );
  });

  test("a metadata command that outlives test_server.metadata_timeout fails the run", async () => {
    await uploadConfig(s, "slow-meta.yml", "tests:\n  g:\n  - sleep:\n      seconds: 0\nmetadata:\n  slow:\n    run: sleep 10\n");
    const run = await waitRun(s, (await trigger(s, { config_name: "slow-meta.yml" })).id);
    assert.equal(run.status, "failed");
    assert.equal(run.error, "metadata command 'slow' failed: timed out");
  });

  test("a local-only run with aggregate_results gets combined results under its trigger", async () => {
    await uploadConfig(s, "agg-local.yml", "aggregate_results: true\ntests:\n  g:\n  - exec:\n      command: 'echo x > out.txt'\n");
    const run = await waitRun(s, (await trigger(s, { config_name: "agg-local.yml" })).id);
    const res = await s.request(`/api/v1/test-runs/trigger/${run.trigger_id}/results`, { token: s.adminToken });
    assert.equal(res.status, 200);
    assert.deepEqual(
      ((await res.json()) as { name: string }[]).map((a) => a.name),
      [`local_${run.id}.csv`, `local_${run.id}/out.txt`],
    );
    const t = (await (await s.request(`/api/v1/test-runs/trigger/${run.trigger_id}`, { token: s.adminToken })).json()) as Record<string, unknown>;
    assert.equal(t.status, "finished");
    assert.equal((t.runs as { id: string }[])[0].id, run.id);
  });

  test("CSV cells are quoted minimally, as Python's csv writer does", async () => {
    await uploadConfig(s, "quote.yml", "tests:\n  g:\n  - exec:\n      name: 'a, \"quoted\" name'\n      command: 'echo x'\n      stdout_contains: 'y,z'\n");
    const run = await waitRun(s, (await trigger(s, { config_name: "quote.yml" })).id);
    const csv = await (await s.request(`/api/v1/test-runs/${run.id}/report`, { token: s.adminToken })).text();
    const lines = csv.split("\r\n");
    assert.match(lines[1], /^"a, ""quoted"" name",exit_code\[test_config0\],test\.py::TestExec::test_exit_code\[test_config0\],[0-9.e-]+,,passed$/);
    assert.match(lines[2], /^"a, ""quoted"" name",stdout\[test_config0\],[^,]+,[0-9.e-]+,"stdout does not contain ""y,z""",failed$/);
    const rows = await reportRows(s, run.id);
    assert.equal(rows[1]["device name"], 'a, "quoted" name');
    assert.equal(rows[1].message, 'stdout does not contain "y,z"');
  });
});
