/**
 * The device logs API's shapes, each once: logs/routes.ts registers them with the routes (the
 * OpenAPI document shows them), the handlers parse and answer with them, the console imports the types.
 */
import * as z from "zod";
import { integerParam, Rfc822, strictBody, zRequiredString } from "../../util/shapes.ts";
import { parseRfc822 } from "../../util/time.ts";

/** Longest `name` (characters) and `entry` (UTF-8 bytes) accepted: entries live in the (in-memory) database. */
export const MAX_NAME = 256;
export const MAX_ENTRY_BYTES = 4096;

/** A log entry; dates in the update server's RFC 822 form. */
export const Log = z
  .object({ id: z.int(), created: Rfc822, device_id: z.int(), device_timestamp: Rfc822, name: z.string().max(MAX_NAME), entry: z.string() })
  .meta({ id: "Log" });
export type Log = z.infer<typeof Log>;

const RFC822_HINT = 'an RFC 822 date such as "Wed, 02 Oct 2002 15:00:00 -0000"';

/** An RFC 822 date given as text, as a Date. */
const rfc822Field = (key: string) =>
  zRequiredString(key, 64).transform((text, ctx) => {
    const date = parseRfc822(text);
    if (!date) ctx.addIssue({ code: "custom", message: `schema validation failed: field "${key}" must be ${RFC822_HINT}` });
    return date ?? z.NEVER;
  });

const LogEntryInput = z.strictObject(
  {
    device_timestamp: rfc822Field("device_timestamp"),
    name: zRequiredString("name", MAX_NAME),
    // An entry may be empty (a metric with no value); it must still be a string.
    entry: z.string({ error: 'schema validation failed: field "entry" must be a string' }).meta({ description: `at most ${MAX_ENTRY_BYTES} bytes in UTF-8 (413 beyond)` }),
  },
  { error: (iss) => (iss.code === "invalid_type" ? "schema validation failed: a batch entry must be an object" : undefined) },
);

/** `{"batch": [{device_timestamp, name, entry}, ...]}` with at most `maxBatch` entries. */
export const LogBatch = (maxBatch: number) =>
  strictBody({
    batch: z
      .array(LogEntryInput, { error: 'schema validation failed: field "batch" must be a list of log entries' })
      .max(maxBatch, { error: (iss) => `schema validation failed: field "batch" has ${(iss.input as unknown[]).length} entries; at most ${maxBatch} are accepted at once` }),
  });

/** One entry of a batch, as the schema leaves it (its timestamp a Date). */
export type LogInput = z.output<typeof LogEntryInput>;

/** The `since`, `to` (RFC 822) and `name` query parameters; a malformed date is a 400. */
const queryDate = (key: string, what: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const date = parseRfc822(text);
      if (!date) ctx.addIssue({ code: "custom", message: `schema validation failed: query parameter "${key}" must be ${RFC822_HINT}` });
      return date;
    })
    .describe(`RFC 822; entries with device_timestamp ${what}`);

/** Which of the entries a delete removes (all without any). */
export const LogDeleteQuery = z.object({
  since: queryDate("since", "at or after"),
  to: queryDate("to", "at or before"),
  name: z
    .string()
    .optional()
    .transform((name) => name || undefined)
    .describe("only entries with this name"),
});

/** The filters, and `limit`/`offset` paging of a list. */
export const LogFilterQuery = LogDeleteQuery.extend({
  limit: integerParam("limit", 1, 1000).describe("at most this many entries (X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many"),
});
