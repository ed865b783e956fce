import * as z from "zod";
import { LabgateError } from "../util/errors.ts";
import { INTEGER_TEXT, jsonObject, readFlag, readInteger } from "../http/openapi.ts";

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

/*
 * Integers and flags in bodies as the reference's request schemas read them (readInteger and
 * readFlag in src/http/openapi.ts say what is accepted and where labgate is stricter).
 */

/** An integer from `min` to `max` given as a number or its decimal text; `message` for anything else. */
export const zInteger = (min: number, max: number, message: string | ((input: unknown) => string)) => {
  const error = typeof message === "string" ? message : (iss: { input: unknown }) => message(iss.input);
  return z
    .preprocess(readInteger, z.int({ error }).min(min, { error }).max(max, { error }))
    .meta({ type: ["integer", "string"], minimum: min, maximum: max, pattern: min >= 0 ? "^\\d{1,16}$" : INTEGER_TEXT.source });
};

/** A positive integer id, as a number or its decimal text. */
export const zId = (message: string | ((input: unknown) => string)) => zInteger(1, Number.MAX_SAFE_INTEGER, message);

/** A flag given as true/false or one of the reference's spellings; `message` for anything else. */
export const zFlag = (message: string) => z.preprocess(readFlag, z.boolean({ error: message })).meta({ type: ["boolean", "string", "integer"] });
