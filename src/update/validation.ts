import { z } from "zod";
import { httpError } from "../http/errors.ts";

/** Request bodies of the update server reject unknown top-level fields (update-server.md 1.1). */
export function onlyKeys(body: Record<string, unknown>, allowed: readonly string[]): void {
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length > 0) throw httpError(400, `schema validation failed: unknown field ${unknown.map((k) => JSON.stringify(k)).join(", ")}`);
}

/** A required non-empty string field. */
export function requireString(body: Record<string, unknown>, key: string, maxLength = 16_384): string {
  const value = body[key];
  if (value === undefined || value === null) throw httpError(400, `schema validation failed: field "${key}" is required`);
  if (typeof value !== "string" || value === "") throw httpError(400, `schema validation failed: field "${key}" must be a non-empty string`);
  if (value.length > maxLength) throw httpError(400, `schema validation failed: field "${key}" is longer than ${maxLength} characters`);
  return value;
}

/** A positive integer path id; anything else (or too large) is answered like a missing object. */
export function pathId(text: string | undefined, what: string): number {
  const id = Number(text);
  if (!text || !/^\d+$/.test(text) || !Number.isSafeInteger(id) || id < 1) throw httpError(404, `${what} does not exist`);
  return id;
}

/*
 * The same rules as zod schemas (src/http/openapi.ts jsonBody), with the same messages: request
 * bodies validated by them are also what the OpenAPI document shows.
 */

/** A JSON object body with exactly these fields; unknown ones are named (jsonBody reports them first). */
export const strictBody = <T extends z.ZodRawShape>(shape: T) =>
  z.strictObject(shape, { error: (iss) => (iss.code === "invalid_type" ? "expected a JSON object" : undefined) });

/** requireString as a schema. */
export const zRequiredString = (key: string, maxLength = 16_384) =>
  z
    .string({
      error: (iss) =>
        iss.input === undefined || iss.input === null
          ? `schema validation failed: field "${key}" is required`
          : `schema validation failed: field "${key}" must be a non-empty string`,
    })
    .min(1, { error: `schema validation failed: field "${key}" must be a non-empty string` })
    .max(maxLength, { error: `schema validation failed: field "${key}" is longer than ${maxLength} characters` });
