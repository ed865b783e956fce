import assert from "node:assert/strict";
import { test } from "node:test";
import { firstMessage } from "../../src/http/openapi.ts";
import { deviceAuthBody } from "../../src/update/registration/schema.ts";
import { checkBody } from "../../src/update/updatecheck/check.ts";

// The zod schemas keep the texts of the hand-written checks they replaced (one error per body).
test("device auth body: the 400 texts of the hand-written checks", () => {
  const schema = deviceAuthBody("svc");
  const meta = { "svc.software.version": "v1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": "aa:bb:cc:dd:ee:ff" };
  const message = (body: unknown) => {
    const result = schema.safeParse(body);
    return result.success ? "ok" : firstMessage(result.error);
  };
  const cases: Array<[unknown, string]> = [
    [{ metadata: meta, public_key: "k", timestamp: 1 }, "ok"],
    [[], "expected a JSON object"],
    [{ metadata: meta, public_key: "k", timestamp: 1, extra: 1 }, 'schema validation failed: unknown field "extra"'],
    [{ metadata: [], public_key: "k", timestamp: 1 }, "schema validation failed: metadata must be an object"],
    [{ metadata: { ...meta, x: 5 }, public_key: "k", timestamp: 1 }, 'schema validation failed: metadata value of "x" must be a string or a list of strings'],
    [{ metadata: { ...meta, x: ["a", 1] }, public_key: "k", timestamp: 1 }, 'schema validation failed: metadata value of "x" must be a string or a list of strings'],
    [{ metadata: { ...meta, x: "y".repeat(4097) }, public_key: "k", timestamp: 1 }, 'schema validation failed: metadata value of "x" must be a string or a list of strings'],
    [{ metadata: { ...meta, "svc.software.version": "" }, public_key: "k", timestamp: 1 }, 'schema validation failed: metadata must contain "svc.software.version" (a non-empty string)'],
    [{ metadata: { ...meta, "svc.hardware.macaddr": "not a mac" }, public_key: "k", timestamp: 1 }, 'schema validation failed: metadata "svc.hardware.macaddr" is not a valid MAC address'],
    [{ metadata: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`k${i}`, "v"])), public_key: "k", timestamp: 1 }, "schema validation failed: metadata has more than 256 keys"],
    [{ metadata: meta, public_key: "", timestamp: 1 }, "schema validation failed: public_key must be a non-empty string"],
    [{ metadata: meta, timestamp: 1 }, "schema validation failed: public_key must be a non-empty string"],
    [{ metadata: meta, public_key: "k", timestamp: 1.5 }, "schema validation failed: timestamp must be an integer (UNIX seconds)"],
    [{ metadata: meta, public_key: "k" }, "schema validation failed: timestamp must be an integer (UNIX seconds)"],
  ];
  for (const [body, expected] of cases) assert.equal(message(body), expected, JSON.stringify(body).slice(0, 80));
});

test("update check body: the 400 texts of the hand-written checks", () => {
  const ok = { "svc.software.version": "v1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": "aa:bb" };
  const cases: Array<[unknown, string | typeof ok]> = [
    [ok, ok],
    [{ ...ok, "svc.software.tags": ["a", "b"] }, { ...ok, "svc.software.tags": ["a", "b"] } as typeof ok],
    [null, "schema validation failed: expected a JSON object of device metadata"],
    [["x"], "schema validation failed: expected a JSON object of device metadata"],
    [{ "svc.hardware.macaddr": 5 }, "schema validation failed: missing required keys: svc.software.version, svc.hardware.devtype"],
    [{ ...ok, "svc.hardware.devtype": undefined }, "schema validation failed: missing required key: svc.hardware.devtype"],
    [{ ...ok, "svc.software.version": 5 }, "schema validation failed: svc.software.version must be a non-empty string"],
    [{ ...ok, "svc.hardware.macaddr": "" }, "schema validation failed: svc.hardware.macaddr must be a non-empty string"],
    [{ ...ok, other: { a: 1 } }, "schema validation failed: value of other must be a string or a list of strings"],
    [{ ...ok, other: ["a", 2] }, "schema validation failed: value of other must be a string or a list of strings"],
  ];
  for (const [body, expected] of cases) assert.deepEqual(checkBody(body, "svc"), expected, JSON.stringify(body));
});
