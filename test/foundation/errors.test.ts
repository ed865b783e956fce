import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { HTTPException } from "hono/http-exception";
import { DatabaseUnavailableError } from "../../src/db/index.ts";
import { errorAnswer, STATUS_OF } from "../../src/http/errors.ts";
import { NodeRefusal } from "../../src/testrun/runs/nodes.ts";
import { LabgateError } from "../../src/util/errors.ts";

test("the one table: every error code has the status clients have always been answered", () => {
  assert.deepEqual(STATUS_OF, {
    invalid: 400,
    unauthenticated: 401,
    forbidden: 403,
    not_found: 404,
    method_not_allowed: 405,
    conflict: 409,
    too_large: 413,
    unsupported_media: 415,
    bad_range: 416,
    unprocessable: 422,
    upgrade_required: 426,
    too_many: 429,
    internal: 500,
    upstream: 502,
    unavailable: 503,
    timeout: 504,
    no_space: 507,
  });
});

test("errorAnswer: a LabgateError by its code with its message and details, a relayed refusal with its status; a full disk 507; anything else is left to the 500", () => {
  assert.deepEqual(errorAnswer(new LabgateError("not_found", "device does not exist")), { status: 404, message: "device does not exist", details: undefined });
  assert.deepEqual(errorAnswer(new LabgateError("unprocessable", "Failed to parse file: bad", { file: "a.yml", line: 3 })), {
    status: 422,
    message: "Failed to parse file: bad",
    details: { file: "a.yml", line: 3 },
  });
  // Internal domain errors go through the same table.
  assert.deepEqual(errorAnswer(new DatabaseUnavailableError("database is closed")), { status: 503, message: "database is closed", details: undefined });
  // A lab node's refusal is a LabgateError that keeps the node's status; a full disk is a 507 wherever the write was.
  assert.ok(new NodeRefusal(410, "node 'old': Run expired") instanceof LabgateError);
  assert.deepEqual(errorAnswer(new NodeRefusal(410, "node 'old': Run expired")), { status: 410, message: "node 'old': Run expired", details: undefined });
  assert.deepEqual(errorAnswer(Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" })), { status: 507, message: "no space left in the data dir" });
  assert.equal(errorAnswer(new Error("ENOENT: no such file")), undefined);
  // No other error becomes an answer by a status of its own: Hono's exceptions and any error with a `status` are internal errors.
  assert.equal(errorAnswer(new HTTPException(413, { message: "too big" })), undefined);
  assert.equal(errorAnswer(new HTTPException(500, { message: "boom" })), undefined);
  assert.equal(errorAnswer(Object.assign(new Error("odd"), { status: 404 })), undefined);
  assert.equal(errorAnswer(Object.assign(new Error("odd"), { status: 200 })), undefined);
});

/** Every source file under `dir`, not the unit tests beside them. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /\.tsx?$/.test(entry.name) && !entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

test("one error style: no file throws an HTTP status or writes an error body of its own; errors get their status in src/http/errors.ts", () => {
  const offenders: string[] = [];
  for (const file of sources("src")) {
    const text = readFileSync(file, "utf8");
    // The old HTTP error, Hono's exception, or a hand-made `{ error: ... }` answer with a status.
    for (const [pattern, what] of [
      [/\bhttpError\(|\bHttpError\b|\bnew HTTPException\b|from "hono\/http-exception"/, "an HTTP error instead of LabgateError"],
      [/\.json\(\s*\{\s*error\s*:[^)]*,\s*\d{3}\s*\)/, "an error body written by hand instead of thrown"],
    ] as const) {
      const match = pattern.exec(text);
      if (match) offenders.push(`${file}: ${what} (${match[0].slice(0, 60)})`);
    }
  }
  assert.deepEqual(offenders, []);
});
