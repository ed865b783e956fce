import assert from "node:assert/strict";
import { test } from "node:test";
import { choice, optional, paramSchema, required } from "./params.ts";
import { checkParams } from "./registry.ts";
import type { ModuleDef } from "./types.ts";

const module = (params: ModuleDef["params"]): ModuleDef => ({ key: "m", className: "TestM", params, deviceName: () => "m", cases: () => [] });

test("a module's zod schema gives the messages a config author reads at trigger", () => {
  const m = module(
    paramSchema(() => ({
      command: required("command", "what to run"),
      port: optional("integer", "a port"),
      ratio: optional("number", "a ratio"),
      flag: optional("boolean", "a flag"),
      label: optional("string", "a label"),
      words: optional("strings", "words"),
      codes: optional("integers", "codes"),
      env: optional("mapping", "env"),
      items: optional("list", "items"),
      value: optional("scalar", "a value"),
      mode: choice(["open", "closed"], "a mode", "open"),
    })),
  );
  const error = (params: Record<string, unknown>) => checkParams(m, { command: "true", ...params }).error;
  assert.equal(checkParams(m, {}).error, "parameter 'command' is required");
  assert.equal(checkParams(m, { command: null }).error, "parameter 'command' is required", "null is absent");
  assert.equal(error({ command: "  " }), "parameter 'command': expected a non-empty command");
  assert.equal(error({ command: [] }), "parameter 'command': expected a non-empty list of arguments");
  assert.equal(error({ command: 3 }), "parameter 'command': expected a command string or a list of arguments");
  assert.equal(error({ port: 1.5 }), "parameter 'port': expected an integer");
  assert.equal(error({ ratio: "x" }), "parameter 'ratio': expected a number");
  assert.equal(error({ flag: "yes" }), "parameter 'flag': expected true or false");
  assert.equal(error({ label: [] }), "parameter 'label': expected a string");
  assert.equal(error({ words: [1] }), "parameter 'words': expected a string or a list of strings");
  assert.equal(error({ codes: [] }), "parameter 'codes': expected an integer or a list of integers");
  assert.equal(error({ env: ["a"] }), "parameter 'env': expected a mapping");
  assert.equal(error({ items: {} }), "parameter 'items': expected a list");
  assert.equal(error({ value: {} }), "parameter 'value': expected a scalar value");
  assert.equal(error({ mode: "ajar" }), "parameter 'mode': expected one of open, closed");
  // YAML numbers are fine where a string is expected (`0x1c`, `20`).
  assert.deepEqual(checkParams(m, { command: ["ls", 1, true], label: 20, codes: 0, mode: "closed", ratio: null, override: "x", colour: "red" }), { unknown: ["colour"] });
});
