import { strict as assert } from "node:assert";
import { test } from "node:test";
import { parseJsonBody } from "./body.ts";
import { LabgateError } from "../util/errors.ts";

const messageOf = (text: string): string => {
  try {
    parseJsonBody(Buffer.from(text));
  } catch (error) {
    assert.ok(error instanceof LabgateError);
    assert.equal(error.code, "invalid");
    return error.message;
  }
  assert.fail(`${JSON.stringify(text)} parsed`);
};

test("a malformed JSON body is a 400 in labgate's words: the place when known, never the runtime's text or the input echoed", () => {
  assert.equal(messageOf("{"), "malformed JSON body at line 1, column 2");
  assert.equal(messageOf('{"a": 1,\n  "b": [1, 2'), "malformed JSON body at line 2, column 13");
  assert.equal(messageOf("   "), "malformed JSON body: no JSON value");
  for (const text of ['{"a":}', "not json", '{"secret-looking": x}']) {
    const message = messageOf(text);
    assert.match(message, /^malformed JSON body/);
    assert.ok(!message.includes(text) && !/Unexpected|token/.test(message), message);
  }
});
