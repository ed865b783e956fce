/**
 * The update check's shapes, each once: updatecheck/routes.ts registers them with the route (the
 * OpenAPI document shows them), the handler parses and answers with them.
 */
import * as z from "zod";
import { Rfc822 } from "../../util/shapes.ts";
import { metaKeys, type Metadata } from "../devices/metadata.ts";

const checkBodies = new Map<string, z.ZodType<Metadata>>();

/**
 * The update-check body: the device's metadata, a flat object whose values are strings (or lists
 * of strings), with the version, device type and MAC keys present as non-empty strings. One schema per prefix.
 */
export function UpdateCheck(prefix: string): z.ZodType<Metadata> {
  let schema = checkBodies.get(prefix);
  if (!schema) {
    const keys = metaKeys(prefix);
    const required = (key: string) =>
      z.string({ error: `schema validation failed: ${key} must be a non-empty string` }).min(1, { error: `schema validation failed: ${key} must be a non-empty string` });
    const value = z.union([z.string(), z.array(z.string())], {
      error: (iss) => `schema validation failed: value of ${String(iss.path?.at(-1) ?? "")} must be a string or a list of strings`,
    });
    schema = z
      .looseObject({ [keys.version]: required(keys.version), [keys.devtype]: required(keys.devtype), [keys.mac]: required(keys.mac) }, {
        error: "schema validation failed: expected a JSON object of device metadata",
      })
      .catchall(value) as unknown as z.ZodType<Metadata>;
    checkBodies.set(prefix, schema);
  }
  return schema;
}

/** The 200 body of an update check: the package to install. */
export const UpdateOffer = z
  .object({
    id: z.int().describe("the package"),
    created: Rfc822,
    sha256: z.string(),
    uri: z.string().describe("a signed, expiring link to the package's file"),
    version: z.string().describe("labgate: the offered package's version, so that an agent can report what it installed"),
    deployment: z.int().optional().describe("labgate: the deployment the offer belongs to (its outcome names it)"),
    attempt: z.int().optional().describe("labgate: the deployment's attempt for this device (its outcome names it)"),
    delta: z
      .object({ id: z.int(), sha256: z.string().describe("of the delta file"), size: z.int(), uri: z.string(), base_version: z.string() })
      .optional()
      .describe("labgate: a delta (xdelta3) from the version the device runs to this package's file; the package itself stays the fallback"),
  })
  .meta({ id: "UpdateOffer" });
export type UpdateOffer = z.infer<typeof UpdateOffer>;
