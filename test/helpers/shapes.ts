import assert from "node:assert/strict";
import type * as z from "zod";

/**
 * `value` is exactly of `schema`: it parses, and parsing changes nothing, so a field the answer
 * has but the schema lacks (zod drops it) or one the schema requires but the answer lacks fails.
 */
export function exact(schema: z.ZodType, value: unknown, what: string): void {
  const result = schema.safeParse(value);
  assert.ok(result.success, `${what}: ${result.success ? "" : JSON.stringify(result.error.issues)}`);
  assert.deepEqual(result.data, value, `${what}: fields the schema does not have`);
}
