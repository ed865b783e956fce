/**
 * Pieces of the API's shapes that many areas use. Imports zod only: the console imports the
 * shape modules built from these (types only, e.g. `import type { Package } from
 * "../../update/packages/schema.ts"`), so nothing here may reach the server's modules.
 */
import { z } from "zod";

/** A time as the update server writes it. */
export const Rfc822 = z.string().describe("RFC 822, e.g. Sat, 21 Nov 2026 07:12:31 GMT");

/** Any JSON object (metadata, capabilities). */
export const AnyObject = z.record(z.string(), z.unknown());

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
