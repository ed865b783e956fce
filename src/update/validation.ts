import { z } from "zod";
import { LabgateError } from "../util/errors.ts";
import { jsonObject } from "../http/openapi.ts";

/** A positive integer path id; anything else (or too large) is answered like a missing object. */
export function pathId(text: string | undefined, what: string): number {
  const id = Number(text);
  if (!text || !/^\d+$/.test(text) || !Number.isSafeInteger(id) || id < 1) throw new LabgateError("not_found", `${what} does not exist`);
  return id;
}

/*
 * Building blocks of the update server's body schemas (validated by jsonBody in
 * src/http/openapi.ts and shown by the OpenAPI document), with labgate's messages.
 */

/** A JSON object body with exactly these fields; unknown ones are named (jsonBody reports them first). */
export const strictBody = <T extends z.ZodRawShape>(shape: T) =>
  z.strictObject(shape, jsonObject);

/** A required non-empty string field of at most `maxLength` characters. */
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
