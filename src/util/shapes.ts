/**
 * Pieces of the API's shapes that many areas use. Imports zod only: the console imports the
 * shape modules built from these (types only, e.g. `import type { Package } from
 * "../../update/packages/schema.ts"`), so nothing here may reach the server's modules.
 */
import * as z from "zod";

/** A time as the update server writes it. */
export const Rfc822 = z.string().describe("RFC 822, e.g. Sat, 21 Nov 2026 07:12:31 GMT");

/** Any JSON object (metadata, capabilities). */
export const AnyObject = z.record(z.string(), z.unknown());

/** The params of an object schema for a whole body: anything but an object is "expected a JSON object". */
export const jsonObject = { error: (iss: { code: string }) => (iss.code === "invalid_type" ? "expected a JSON object" : undefined) };

/** An integer query parameter from `min` to `max` (absent: undefined), with the one error text. */
export const integerParam = (key: string, min: number, max: number) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const n = /^\d{1,16}$/.test(text) ? Number(text) : NaN;
      if (n >= min && n <= max) return n;
      ctx.addIssue({ code: "custom", message: `query parameter "${key}" must be an integer from ${min} to ${max}` });
      return undefined;
    })
    .meta({ type: "integer", minimum: min, maximum: max });

/*
 * Numbers and flags as the reference's request schemas (marshmallow) read them, so that its tools
 * work unchanged: an integer also comes as its decimal text ("1": rdfm-mgmt sends ids as
 * strings), a flag as one of marshmallow's spellings ("true", "yes", "on", "1", 1 and the like).
 * Stricter on purpose (README): no fractions (marshmallow truncates 1.5 to 1), no `+`, spaces or
 * `_` digit separators in the text, no other words for true and false.
 */
export const INTEGER_TEXT = /^-?\d{1,16}$/;
const TRUE_WORDS = new Set(["true", "True", "TRUE", "t", "T", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON", "1"]);
const FALSE_WORDS = new Set(["false", "False", "FALSE", "f", "F", "no", "No", "NO", "n", "N", "off", "Off", "OFF", "0"]);

/** `value` as the reference reads an integer: a number, or its decimal text; anything else unchanged (for a schema to refuse). */
export const readInteger = (value: unknown): unknown => (typeof value === "string" && INTEGER_TEXT.test(value) ? Number(value) : value);

/** `value` as the reference reads a boolean: true, false, one of its words, 1 or 0; anything else unchanged. */
export function readFlag(value: unknown): unknown {
  if (value === 1 || (typeof value === "string" && TRUE_WORDS.has(value))) return true;
  if (value === 0 || (typeof value === "string" && FALSE_WORDS.has(value))) return false;
  return value;
}

/** A flag query parameter (`?details=true`); absent: undefined. */
export const flagParam = (key: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const flag = readFlag(text);
      if (typeof flag === "boolean") return flag;
      ctx.addIssue({ code: "custom", message: `query parameter "${key}" must be true or false` });
      return undefined;
    })
    .meta({ type: "boolean" });

/*
 * Building blocks of body schemas (validated by jsonBody in src/http/openapi.ts and shown by the
 * OpenAPI document), with labgate's messages.
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
 * readFlag above say what is accepted and where labgate is stricter).
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

/** The issue a client is told of: an unknown field first, as the hand-written checks did. */
export const reportedIssue = (error: z.ZodError) => error.issues.find((i) => i.code === "unrecognized_keys") ?? error.issues[0];

/** The message of a failed parse: the reported issue's own text. */
export function firstMessage(error: z.ZodError): string {
  const issue = reportedIssue(error);
  if (issue.code === "unrecognized_keys") return `schema validation failed: unknown field ${issue.keys.map((k) => JSON.stringify(k)).join(", ")}`;
  return issue.message;
}
