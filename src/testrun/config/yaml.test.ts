/* The test-config YAML walker (yaml.ts): PyYAML's dialect over the `yaml` package's syntax tree, one anchor namespace per load. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { AnchorRegistry, Budget, fromPlain, keyText, lineAt, parseConfigFile, parseStandalone, toPlain, YamlError, yamlSyntaxProblem, type YMap, type YValue } from "./yaml.ts";

const plain = (value: YValue) => toPlain(value, new Budget());
/** Parses `text` as one file of a load with its own anchors and budget. */
const parse = (text: string, file = "main.yml", registry = new AnchorRegistry(), budget = new Budget()) => parseConfigFile(text, file, registry, budget);

test("YAML 1.1 scalars as PyYAML's safe loader reads them: yes/on/off booleans but not y/n, octal, hex, sexagesimal, dates kept as text", () => {
  const { root } = parse("{a: y, b: n, c: yes, d: Off, e: 010, f: 0x10, g: 1:20, h: 2024-01-01, i: ~, j: 1_000, l: 1e3, m: 1.5e+3, n: .5}");
  assert.deepEqual(plain(root), { a: "y", b: "n", c: true, d: false, e: 8, f: 16, g: 80, h: "2024-01-01", i: null, j: 1000, l: "1e3", m: 1500, n: 0.5 });
  assert.equal(parse("").root, null, "an empty file is null");
});

test("mapping keys keep their YAML 1.1 type and print as Python's str() would", () => {
  const root = parse("000: zero\ntrue: yes\n~: none\n1.5: x\n").root as YMap;
  assert.deepEqual([...root.keys()], [0, true, null, 1.5]);
  assert.deepEqual([true, false, null, 0, "a"].map((k) => keyText(k)), ["True", "False", "None", "0", "a"]);
  assert.deepEqual(plain(root), { 0: "zero", True: true, None: "none", "1.5": "x" });
});

test("duplicate keys: the last value wins, in the first one's place", () => {
  const root = parse("k: first\nother: 1\nk: second\n").root as YMap;
  assert.deepEqual([...root.entries()], [["k", "second"], ["other", 1]]);
});

test("aliases share the anchored value (no copy); merge keys copy the pairs, own keys win, the first of a list of merges wins", () => {
  const root = parse("a: &a {device: a, k: a}\nb: &b {device: b, j: b}\nsame: *a\nmerged:\n  <<: [*a, *b]\n  k: own\n").root as YMap;
  assert.equal(root.get("same"), root.get("a"), "one value, two places");
  assert.deepEqual(plain(root.get("merged")!), { device: "a", j: "b", k: "own" });
  assert.notEqual(root.get("merged"), root.get("a"));
  assert.throws(() => parse("a: &a [1]\nb: {<<: *a}\n"), /main\.yml line 2: a merge key needs a mapping or a list of mappings/);
});

test("one anchor namespace per load: a later file sees an earlier file's anchors, later definitions shadow, an unknown alias names its file and line", () => {
  const registry = new AnchorRegistry();
  parse("base: &base {device: one}\n", "first.yml", registry);
  const second = parse("uses: *base\nbase: &base {device: two}\nagain: *base\n", "second.yml", registry).root as YMap;
  assert.deepEqual(plain(second), { uses: { device: "one" }, base: { device: "two" }, again: { device: "two" } });
  assert.throws(
    () => parse("x: 1\ny: *nowhere\n", "third.yml", new AnchorRegistry()),
    (error: unknown) => error instanceof YamlError && error.message === "third.yml line 2: found undefined alias 'nowhere'" && error.at?.file === "third.yml" && error.at.line === 2,
  );
});

test("the registry follows an anchor to where it was defined once an override replaced the value there", () => {
  const registry = new AnchorRegistry();
  const { root, anchors } = parse("x: &x {device: old}\n", "main.yml", registry);
  (root as YMap).set("x", new Map([["device", "new"]]));
  assert.deepEqual(plain(registry.get("x")), { device: "old" });
  registry.refresh(anchors);
  assert.deepEqual(plain(registry.get("x")), { device: "new" });
});

test("the budget counts the nodes walked, so an alias bomb (small text, shared values, exponential walk) stops early", () => {
  const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
  for (let i = 1; i < 8; i++) bomb.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill(`*${String.fromCharCode(96 + i)}`).join(", ")}]`);
  const { root } = parse(bomb.join("\n"), "bomb.yml", new AnchorRegistry(), new Budget(10_000));
  assert.throws(() => toPlain(root, new Budget(100_000)), /too large once aliases are expanded \(more than 100000 nodes\)/);
  assert.throws(() => parse("[1, 2, 3]", "small.yml", new AnchorRegistry(), new Budget(2)), /more than 2 nodes/);
});

test("nesting deeper than the walkers' bound is refused by the parser, the syntax check and fromPlain", () => {
  assert.throws(() => parse("a: " + "[".repeat(200) + "]".repeat(200)), /nesting deeper than 128 levels/);
  assert.match(yamlSyntaxProblem("a: " + "[".repeat(5000) + "]".repeat(5000))?.message ?? "", /nest/);
  let deep: unknown = 1;
  for (let i = 0; i < 200; i++) deep = [deep];
  assert.throws(() => fromPlain(deep), /nesting deeper than 128 levels/);
});

test("toPlain and fromPlain: Maps to objects and back; a key named __proto__ stays a plain key", () => {
  const value = parseStandalone("__proto__: {polluted: true}\nlist: [1, {a: b}]\n", "overrides");
  const out = plain(value) as Record<string, unknown>;
  assert.deepEqual(Object.keys(out), ["__proto__", "list"]);
  assert.equal(Object.getPrototypeOf(out), Object.prototype);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  assert.deepEqual(plain(fromPlain({ list: [1, { a: "b" }], none: undefined })), { list: [1, { a: "b" }], none: null });
});

test("lineAt: the 1-based line of an offset", () => {
  assert.deepEqual([0, 1, 2, 4, 5].map((offset) => lineAt("a\nb\n\nc", offset)), [1, 1, 2, 3, 4]);
});

test("upload syntax check: well-formed YAML only, aliases left unresolved (an include may use its includer's anchors)", () => {
  assert.equal(yamlSyntaxProblem("tests:\n  g:\n    - simple: *from_includer\n"), undefined);
  assert.equal(yamlSyntaxProblem(""), undefined);
  assert.match(yamlSyntaxProblem("a: [1, 2\n")?.message ?? "", /./);
  assert.match(yamlSyntaxProblem("a: 1\n---\nb: 2\n")?.message ?? "", /./);
  // The line of the problem, for the console to point at.
  assert.deepEqual(yamlSyntaxProblem("a: 1\nb: 2\nc: d: 3\ne: 4\n"), { message: "Nested mappings are not allowed in compact mappings (line 3)", line: 3 });
});
