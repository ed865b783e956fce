import { strict as assert } from "node:assert";
import { readFileSync, writeFileSync } from "node:fs";

/**
 * A document written from the code (docs/routes.md, docs/modules.md): rewritten when `env` is
 * `1` (its npm script sets it), else the test fails when the committed file differs.
 */
export function checkGeneratedDoc(path: string, text: string, env: string, regenerate: string): void {
  let before = "";
  try {
    before = readFileSync(path, "utf8");
  } catch {
    // Not written yet.
  }
  if (process.env[env] === "1") writeFileSync(path, text);
  else assert.equal(before, text, `${path} is stale: run ${regenerate} and commit it`);
}
