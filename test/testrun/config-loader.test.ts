// Unit tests of the test-config layer: YAML dialect, includes, anchors, overrides, hints,
// suites and the plan (test-run-server.md sections 2 to 5). No HTTP here; configs.test.ts
// covers the routes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildPlan } from "../../src/testrun/config/plan-builder.ts";
import { caseNames, planForMachine, planMachines, PlanError, type PlanRequest, type TestPlan } from "../../src/testrun/plan.ts";
import { listSuites, overrideHints, snapshotSource } from "../../src/testrun/config/plan-builder.ts";
import { yamlSyntaxProblem } from "../../src/testrun/config/yaml.ts";
import { STATUS_OF } from "../../src/http/errors.ts";
import { API_TEST } from "./run-helpers.ts";

type Files = Record<string, string>;
const plan = (files: Files, request: Partial<PlanRequest> = {}): TestPlan => buildPlan(snapshotSource(files), { configName: "main.yml", ...request });
const params = (p: TestPlan) => p.entries.map((e) => e.params);
const devices = (p: TestPlan) => p.entries.map((e) => e.params.device);

/** Asserts that `fn` throws a PlanError answered with `status` and a message matching `pattern`. */
function fails(fn: () => unknown, status: number, pattern: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof PlanError, `expected a PlanError, got ${String(error)}`);
    assert.equal(STATUS_OF[error.code], status, error.message);
    assert.match(error.message, pattern);
    return true;
  });
}

test("override hints and suites of the tests/api-test.yml example (4.2)", () => {
  const source = snapshotSource({ "api-test.yml": API_TEST });
  assert.deepEqual(overrideHints(source, "api-test.yml"), ["tests.base.0.simple.device", "tests.ext.0.simple.device"]);
  assert.deepEqual(listSuites(source, "api-test.yml"), ["compl"]);
});

test("hints: lists, nested keys, suites and includes, relative to their mapping, no de-duplication (4.2 larger case)", () => {
  const files = {
    "main.yml": `includes: [inc.yml]
override: top_level_hint
tests:
  g:
    - simple:
        device: a
        nested: {key: 1}
        override: [device, nested.key]
test-suites:
  s:
    tests: [g]
    override: tests
`,
    "inc.yml": `tests:
  c:
    - simple: {device: x, override: device}
override: [tests.c.0.simple.device, tests.c.0.simple.device]
`,
  };
  assert.deepEqual(overrideHints(snapshotSource(files), "main.yml"), [
    "top_level_hint",
    "tests.g.0.simple.device",
    "tests.g.0.simple.nested.key",
    "test-suites.s.tests",
    "tests.c.0.simple.device",
    "tests.c.0.simple.device",
    "tests.c.0.simple.device",
  ]);
});

test("a hint that is neither a string nor a list makes the config invalid (422)", () => {
  fails(() => overrideHints(snapshotSource({ "main.yml": "tests: {}\noverride: {a: 1}\n" }), "main.yml"), 422, /override hint must be a string or a list of strings/);
});

test("YAML 1.1 dialect: yes/on booleans but not y/n, octal and hex ints, sexagesimal, dates as strings, last duplicate wins", () => {
  const p = plan({
    "main.yml": `tests:
  g:
    - exec: {a: y, b: n, c: yes, d: Off, e: 010, f: 0x10, g: 1:20, h: 2024-01-01, i: ~, j: 1_000, k: first, k: second, l: 1e3, m: 1.5e+3, n: .5}
`,
  });
  assert.deepEqual(p.entries[0].params, { a: "y", b: "n", c: true, d: false, e: 8, f: 16, g: 80, h: "2024-01-01", i: null, j: 1000, k: "second", l: "1e3", m: 1500, n: 0.5 });
});

test("groups and entries: list and mapping forms, multi-key entries, empty params, parameter ids per module key (5)", () => {
  const p = plan({
    "main.yml": `tests:
  one:
    - simple: {device: a}
    - sleep:
    - simple: {device: b}
      exec: {command: "true"}
  two:
    tests:
      - simple: {device: c}
`,
  });
  assert.deepEqual(
    p.entries.map((e) => [e.group, e.index, e.module, e.paramId, e.where]),
    [
      ["one", 0, "simple", "test_config0", "tests.one.0.simple"],
      ["one", 1, "sleep", "test_config0", "tests.one.1.sleep"],
      ["one", 2, "simple", "test_config1", "tests.one.2.simple"],
      ["one", 3, "exec", "test_config0", "tests.one.2.exec"],
      ["two", 0, "simple", "test_config2", "tests.two.0.simple"],
    ],
  );
  assert.deepEqual(p.entries[1].params, {});
  assert.equal(p.selection, "all");
  assert.deepEqual(p.groups, ["one", "two"]);
});

test("invalid entries are 422 naming the group and entry", () => {
  fails(() => plan({ "main.yml": "tests:\n  g:\n    - simple: {}\n      override: device\n" }), 422, /tests\.g\.0: an override hint cannot be placed beside a module key/);
  fails(() => plan({ "main.yml": "tests:\n  override: [x]\n  g: []\n" }), 422, /tests\.override/);
  fails(() => plan({ "main.yml": "tests:\n  g:\n    - simple: [1, 2]\n" }), 422, /tests\.g\.0\.simple: parameters must be a mapping/);
  fails(() => plan({ "main.yml": "tests:\n  g:\n    - just-a-string\n" }), 422, /tests\.g\.0: an entry must be a mapping/);
  fails(() => plan({ "main.yml": "tests:\n  g:\n    machines: [n1]\n    tests:\n      - simple: {machines: n2}\n" }), 422, /machines defined in both group and test/);
  fails(() => plan({ "main.yml": "- a\n- b\n" }), 422, /top level must be a mapping/);
  fails(() => plan({ "main.yml": "tests: [a]\n" }), 422, /'tests' must be a mapping/);
});

test("an empty config is a valid empty plan; a missing one is 404; a bad name is 400", () => {
  assert.deepEqual(plan({ "main.yml": "" }).entries, []);
  fails(() => plan({}), 404, /Configuration file not found/);
  fails(() => plan({ "main.yml": "" }, { configName: "../main.yml" }), 400, /invalid config name/);
  fails(() => plan({ "main.yml": "" }, { configName: "/etc/passwd" }), 400, /invalid config name/);
});

test("includes: nested, depth-first, included groups first, later definitions replace in place", () => {
  const p = plan({
    "main.yml": "includes: [a.yml, c.yml]\ntests:\n  m: [{simple: {device: main}}]\n  shared: [{simple: {device: from-main}}]\n",
    "a.yml": "includes: b.yml\ntests:\n  a: [{simple: {device: a}}]\n",
    "b.yml": "tests:\n  b: [{simple: {device: b}}]\n  shared: [{simple: {device: from-b}}]\n",
    "c.yml": "tests:\n  c: [{simple: {device: c}}]\n",
  });
  assert.deepEqual(p.groups, ["b", "shared", "a", "c", "m"]);
  assert.deepEqual(devices(p), ["b", "from-main", "a", "c", "main"]);
  assert.deepEqual(Object.keys(p.files).sort(), ["a.yml", "b.yml", "c.yml", "main.yml"]);
});

test("includes: a diamond is loaded once; a cycle, a missing include and a non-store name are 422", () => {
  const diamond = plan({
    "main.yml": "includes: [l.yml, r.yml]\n",
    "l.yml": "includes: [d.yml]\ntests: {l: [{simple: {device: l}}]}\n",
    "r.yml": "includes: [d.yml]\ntests: {r: [{simple: {device: r}}]}\n",
    "d.yml": "tests: {d: [{simple: {device: d}}]}\n",
  });
  assert.deepEqual(diamond.groups, ["d", "l", "r"]);
  fails(() => plan({ "main.yml": "includes: [a.yml]\n", "a.yml": "includes: [b.yml]\n", "b.yml": "includes: [a.yml]\n" }), 422, /include cycle: a\.yml -> b\.yml -> a\.yml/);
  fails(() => plan({ "main.yml": "includes: [main.yml]\n" }), 422, /include cycle: main\.yml -> main\.yml/);
  fails(() => plan({ "main.yml": "includes: [a.yml]\n", "a.yml": "includes: [gone.yml]\n" }), 422, /a\.yml: included config 'gone\.yml' not found/);
  for (const bad of ["../x.yml", "/etc/passwd", "sub/x.yml", "x.txt"]) fails(() => plan({ "main.yml": `includes: ["${bad}"]\n` }), 422, /invalid include name/);
});

test("anchors across files: includes see the includer's and earlier siblings' anchors, not the reverse (2.5)", () => {
  const p = plan({
    "main.yml": "includes: [anchors1.yml, anchors2.yml]\nbase: &base {device: from-main}\n",
    "anchors1.yml": "conf: &simple {device: from-1}\ntests:\n  one: [{simple: *base}]\n",
    "anchors2.yml": "tests:\n  two:\n    - simple:\n        <<: *simple\n        extra: 1\n",
  });
  assert.deepEqual(params(p), [{ device: "from-main" }, { device: "from-1", extra: 1 }]);
  fails(() => plan({ "main.yml": "includes: [a.yml]\ntests: {g: [{simple: *late}]}\n", "a.yml": "x: &late {device: d}\n" }), 422, /found undefined alias 'late'/);
});

test("merge keys: own keys win, the first of a list of merges wins", () => {
  const p = plan({ "main.yml": "a: &a {device: a, k: a}\nb: &b {device: b, j: b}\ntests:\n  g:\n    - simple:\n        <<: [*a, *b]\n        k: own\n" });
  assert.deepEqual(p.entries[0].params, { device: "a", j: "b", k: "own" });
});

test("overrides and anchors (3.5): plain aliases share the value everywhere, merge copies only see it when parsed later", () => {
  const p = plan({
    "main.yml": `includes: [inc.yml]
x: &a {device: foo}
tests:
  g:
    - simple: *a
    - simple:
        <<: *a
x.device: bar
`,
    "inc.yml": "tests:\n  i:\n    - simple:\n        <<: *a\n    - simple: *a\n",
  });
  // Included groups first: i.0 (merge, parsed after the override) and i.1 (alias); then g.0 (alias), g.1 (early merge).
  assert.deepEqual(devices(p), ["bar", "bar", "bar", "foo"]);
});

test("an override applied in an include changes the includer's plain aliases too", () => {
  const p = plan(
    {
      "main.yml": "includes: [inc.yml]\nshared: &a {device: orig}\ntests:\n  g:\n    - simple: *a\n",
      "inc.yml": "tests:\n  c:\n    - simple: *a\n",
    },
    { overrides: "tests.c.0.simple.device: changed" },
  );
  assert.deepEqual(devices(p), ["changed", "changed"]);
});

test("in-file override placements of 3.2", () => {
  const p = plan({
    "main.yml": `includes: [inc.yml]
tests.000.0.simple.device: at-root
conf_simple.device: via-include
tests:
  000:
    - simple: {device: x}
    - simple: {device: x}
    - simple:
        device: x
        nested: {list: [1, 2]}
        nested.list.1: inside-params
    - simple:
        device: x
      simple.device: beside-module
  001.1.simple.device: never
  000.1.simple.device: inside-tests
  g:
    - simple: {device: x}
    - simple: {device: x}
  tests.g.1.simple.device: nothing
`,
    "inc.yml": "conf_simple: &predefined {device: default}\ntests:\n  inc:\n    - simple: *predefined\n",
  });
  assert.deepEqual(devices(p), ["via-include", "at-root", "inside-tests", "x", "beside-module", "x", "x"]);
  assert.deepEqual(p.entries[3].params, { device: "x", nested: { list: [1, "inside-params"] } });
  assert.equal(p.entries[1].group, "0");
  assert.deepEqual(
    p.warnings.filter((w) => w.includes("matches nothing")).map((w) => w.split("'")[1]),
    ["tests.001.1.simple.device", "tests.tests.g.1.simple.device"],
  );
});

test("precedence for one path: request > outer file > inner file; values reach includes as data (3.4)", () => {
  const files = {
    "main.yml": "includes: [inc.yml]\ntests.c.0.simple.device: outer\n",
    "inc.yml": "tests:\n  c:\n    - simple: {device: inner}\n    - simple: {device: inner}\ntests.c.0.simple.device: innermost\ntests.c.1.simple.device: inner-own\n",
  };
  assert.deepEqual(devices(plan(files)), ["outer", "inner-own"]);
  assert.deepEqual(devices(plan(files, { overrides: "tests.c.0.simple.device: request" })), ["request", "inner-own"]);
  // The reference re-parsed values as text ("yes" -> true, "007" -> 7); we pass data.
  const typed = plan(files, { overrides: 'tests.c.0.simple.device: "yes"\ntests.c.1.simple.device: "007"' });
  assert.deepEqual(devices(typed), ["yes", "007"]);
});

test("Variant A string overrides: lines kept, YAML 1.1 values, block values, adding a key, list element", () => {
  const files = { "main.yml": "tests:\n  g:\n    - simple: {device: a, list: [1, 2, 3]}\n" };
  const p = plan(files, { overrides: "tests.g.0.simple.device: via_api\r\ntests.g.0.simple.extra: 1\ntests.g.0.simple.hex: 0x10\ntests.g.0.simple.flag: yes\ntests.g.0.simple.list.2: three\ntests.g.0.simple.block:\n  - a\n  - b\n" });
  assert.deepEqual(p.overrides, ["tests.g.0.simple.device: via_api", "tests.g.0.simple.extra: 1", "tests.g.0.simple.hex: 0x10", "tests.g.0.simple.flag: yes", "tests.g.0.simple.list.2: three", "tests.g.0.simple.block:", "  - a", "  - b"]);
  assert.deepEqual(p.entries[0].params, { device: "via_api", list: [1, 2, "three"], extra: 1, hex: 16, flag: true, block: ["a", "b"] });
  assert.deepEqual(plan(files, { overrides: "" }).overrides, []);
  assert.equal(plan(files).overrides, null);
});

test("Variant A string overrides: every malformed form is 400 and an unmatched path is 400", () => {
  const files = { "main.yml": "tests:\n  g:\n    - simple: {device: a}\n" };
  fails(() => plan(files, { overrides: "a: [unclosed" }), 400, /^invalid overrides: /);
  fails(() => plan(files, { overrides: "- a\n- b" }), 400, /^invalid overrides: expected a mapping/);
  fails(() => plan(files, { overrides: "1: x" }), 400, /^invalid overrides: override keys must be strings/);
  fails(() => plan(files, { overrides: "tests.nope.0.simple.device: x" }), 400, /override 'tests\.nope\.0\.simple\.device' matches nothing in config 'main\.yml'/);
  fails(() => plan(files, { overrides: "tests.g.0.simple.device.deeper: x" }), 400, /matches nothing/);
  fails(() => plan(files, { overrides: "tests..g: x" }), 400, /matches nothing/);
  fails(() => plan(files, { overrides: "tests.g.5: x" }), 400, /matches nothing/);
  fails(() => plan(files, { overrides: 5 as unknown as string }), 400, /invalid overrides/);
});

test("Variant B object overrides: deep merge of mappings, list elements by index, append, replace, null (3.6)", () => {
  const files = { "main.yml": "tests:\n  g:\n    - simple: {device: a, nested: {x: 1, y: 2}, list: [1, 2]}\n  000:\n    - sleep: {seconds: 1}\n" };
  const given = { tests: { g: { "0": { simple: { device: "b", nested: { y: 3, z: 4 }, list: [9] } }, "1": { exec: { command: "true" } } }, "0": { "0": { sleep: { seconds: null } } } } };
  const p = plan(files, { overrides: given });
  assert.deepEqual(
    p.entries.map((e) => [e.module, e.params]),
    [
      ["simple", { device: "b", nested: { x: 1, y: 3, z: 4 }, list: [9] }],
      ["exec", { command: "true" }],
      ["sleep", { seconds: null }],
    ],
  );
  assert.deepEqual(p.overrides, given);
  fails(() => plan(files, { overrides: { tests: { g: { "5": { simple: {} } } } } }), 400, /index 5 is out of range/);
  fails(() => plan(files, { overrides: { tests: { g: { "0": "not an entry" } } } }), 400, /^invalid overrides: tests\.g\.0: an entry must be a mapping/);
  fails(() => plan(files, { overrides: ["a"] as unknown as Record<string, unknown> }), 400, /invalid overrides/);
  const suites = plan(files, { overrides: { "test-suites": { s: { tests: ["0"] } } }, suite: "s" });
  assert.deepEqual(suites.groups, ["0"]);
});

test("suites: nested, forward references, cycles, unknown names, metadata lists (2.6)", () => {
  const files = {
    "main.yml": `includes: [inc.yml]
tests:
  g1: [{simple: {device: g1}}]
  g2: [{simple: {device: g2}}]
  g3: [{simple: {device: g3}}]
metadata:
  kernel: {run: uname -r}
  hello: {run: echo hello}
test-suites:
  A: {tests: [B, g1], metadata: [hello, missing]}
  B: {tests: [g2]}
  D: {tests: [E]}
  E: {tests: [D, g3, nope]}
  all: {tests: [A, D, g1, inc-suite]}
`,
    "inc.yml": "tests:\n  gi: [{simple: {device: gi}}]\ntest-suites:\n  inc-suite: {tests: [gi]}\n",
  };
  const a = plan(files, { suite: "A" });
  assert.equal(a.selection, "suite");
  assert.deepEqual(a.groups, ["g2", "g1"]);
  assert.deepEqual(a.metadata.map((m) => m.name), ["hello"]);
  assert.ok(a.warnings.some((w) => w.includes("unknown metadata 'missing'")));
  const d = plan(files, { suite: "D" });
  assert.deepEqual(d.groups, ["g3"]);
  assert.ok(d.warnings.some((w) => w.includes("cycle")));
  assert.ok(d.warnings.some((w) => w.includes("'nope'")));
  assert.deepEqual(plan(files, { suite: "all" }).groups, ["g2", "g1", "g3", "gi"]);
  const group = plan(files, { suite: "g3" });
  assert.equal(group.selection, "group");
  assert.deepEqual(group.metadata.map((m) => m.name), ["kernel", "hello"]);
  assert.deepEqual(plan(files).metadata.map((m) => m.name), ["kernel", "hello"]);
  fails(() => plan(files, { suite: "nothing" }), 404, /Unknown test suite or test group: nothing/);
  // Listing: first-definition order over the load order (main file first).
  assert.deepEqual(listSuites(snapshotSource(files), "main.yml"), ["A", "B", "D", "E", "all", "inc-suite"]);
  fails(() => plan({ "main.yml": "tests: {g: []}\ntest-suites: {g: {tests: []}}\n" }), 422, /test-suite 'g' conflicts with test group 'g'/);
});

test("metadata commands are validated at trigger (2.7)", () => {
  const ok = plan({ "main.yml": "metadata:\n  distro-name: {run: cat /etc/os-release, superuser: preferred, on-fail: {run: echo unknown, output: ignored.out}}\n" });
  assert.deepEqual(ok.metadata, [{ name: "distro-name", run: "cat /etc/os-release", onFail: { run: "echo unknown", output: "ignored.out" }, superuser: "preferred" }]);
  fails(() => plan({ "main.yml": "metadata:\n  k: {summary: x}\n" }), 422, /metadata 'k': 'run' is required/);
  fails(() => plan({ "main.yml": "metadata:\n  x/y: {run: id}\n" }), 422, /safe file name/);
  fails(() => plan({ "main.yml": "metadata:\n  a b: {run: id}\n" }), 422, /safe file name/);
});

test("machines: filtering for a node role renumbers parameter ids (2.8, 5)", () => {
  const files = {
    "main.yml": `tests:
  g:
    - simple: {device: local}
    - simple: {device: both, machines: [n1, n2]}
  h:
    machines: n2
    tests:
      - simple: {device: h}
`,
  };
  const all = plan(files);
  assert.deepEqual(planMachines(all), ["n1", "n2"]);
  assert.deepEqual(all.entries.map((e) => e.machines), [[], ["n1", "n2"], ["n2"]]);
  assert.ok(!("machines" in all.entries[1].params));
  const n2 = plan(files, { machineTarget: "n2" });
  assert.deepEqual(n2.entries.map((e) => [e.params.device, e.paramId]), [["both", "test_config0"], ["h", "test_config1"]]);
  assert.deepEqual(n2.groups, ["g", "h"]);
  assert.deepEqual(planForMachine(all, "localhost").entries.map((e) => [e.params.device, e.paramId]), [["local", "test_config0"]]);
  assert.deepEqual(plan(files, { machineTarget: "n1" }).entries.map((e) => e.params.device), ["both"]);
});

test("caseNames gives the report names and the pattern names of 10.3", () => {
  const names = caseNames({ module: "nested_tests/impl1/hello", paramId: "test_config1" }, "hello", "TestHello");
  assert.equal(names.testName, "hello[test_config1]");
  assert.equal(names.moduleColumn, "test.py::TestHello::test_hello[test_config1]");
  assert.deepEqual(names.matchNames, ["test_hello[test_config1]", "hello[test_config1]", "TestHello", "test.py", "nested_tests/impl1/hello", "nested_tests", "impl1", "hello"]);
});

test("hostile input: alias explosion, deep nesting and recursive overrides are refused quickly with 422", () => {
  const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
  for (let i = 1; i < 10; i++) bomb.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill(`*${String.fromCharCode(96 + i)}`).join(", ")}]`);
  bomb.push("tests:\n  g:\n    - exec: {list: *j}");
  fails(() => plan({ "main.yml": bomb.join("\n") + "\n" }), 422, /too large once aliases are expanded/);

  fails(() => plan({ "main.yml": "tests: " + "[".repeat(5000) + "]".repeat(5000) + "\n" }), 422, /nest/);
  assert.match(yamlSyntaxProblem("a: " + "[".repeat(5000) + "]".repeat(5000))?.message ?? "", /nest/);
  // An override that makes a mapping contain itself must not hang or crash the walkers.
  fails(() => plan({ "main.yml": "x: &x {k: 1}\nx.self: *x\ntests:\n  g:\n    - simple: *x\n" }), 422, /too large|deeper/);
});

test("the shipped assets/testrun/api-test.yml gives the hints and suites of 4.2", async () => {
  const { readFileSync } = await import("node:fs");
  const text = readFileSync(new URL("../../assets/testrun/api-test.yml", import.meta.url), "utf8");
  const source = snapshotSource({ "api-test.yml": text });
  assert.deepEqual(overrideHints(source, "api-test.yml"), ["tests.base.0.simple.device", "tests.ext.0.simple.device"]);
  assert.deepEqual(listSuites(source, "api-test.yml"), ["compl"]);
});
