import { readFileSync } from "node:fs";
import { test } from "node:test";
import { deviceProtocolDoc } from "../../src/protocol/doc.ts";
import { checkGeneratedDoc } from "../helpers/generated-doc.ts";

const DOC = "docs/device-protocol.md";

test(`${DOC} is written from the message schemas and src/protocol/labgate/guide.md (npm run protocol-doc rewrites it)`, () => {
  const guide = readFileSync("src/protocol/labgate/guide.md", "utf8");
  checkGeneratedDoc(DOC, deviceProtocolDoc(guide), "UPDATE_PROTOCOL_DOC", "npm run protocol-doc");
});
