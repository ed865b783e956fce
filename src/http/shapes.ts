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
