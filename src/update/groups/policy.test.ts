/* Group update policies (policy.ts): the text a group stores, and the version it targets. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { DEFAULT_POLICY, parsePolicy, policyTarget } from "./policy.ts";

test("a policy is split at its first comma: the name, then the argument whole (commas and spaces kept)", () => {
  assert.deepEqual(parsePolicy("no_update,"), { name: "no_update", argument: "" });
  assert.deepEqual(parsePolicy("exact_match,v2"), { name: "exact_match", argument: "v2" });
  assert.deepEqual(parsePolicy("exact_match,v2,rc 1"), { name: "exact_match", argument: "v2,rc 1" });
  assert.deepEqual(parsePolicy(DEFAULT_POLICY), { name: "no_update", argument: "" }, "the default parses");
});

test("an invalid policy is the 400 message, naming what is wrong", () => {
  assert.equal(parsePolicy("exact_match"), "invalid policy: invalid policy string, missing arguments");
  assert.equal(parsePolicy(""), "invalid policy: invalid policy string, missing arguments");
  assert.equal(parsePolicy("newest,v2"), "invalid policy: invalid policy type: 'newest'");
  assert.equal(parsePolicy("Exact_Match,v2"), "invalid policy: invalid policy type: 'Exact_Match'", "names are case-sensitive");
  assert.equal(parsePolicy(" exact_match,v2"), "invalid policy: invalid policy type: ' exact_match'", "no trimming");
});

test("the target: exact_match's version; none for no_update or a policy that does not parse", () => {
  assert.equal(policyTarget("exact_match,v2"), "v2");
  assert.equal(policyTarget("exact_match,"), "", "an empty version is a target (no package has it, so nothing is offered)");
  assert.equal(policyTarget("no_update,v2"), undefined, "no_update ignores its argument");
  assert.equal(policyTarget("exact_match"), undefined);
  assert.equal(policyTarget("newest,v2"), undefined);
});
