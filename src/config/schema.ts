/**
 * What the server's config (config.ts) and the agent's (src/agent/config.ts) are written with:
 * zod schemas of their keys with messages that say what a key accepts, and one way to turn the
 * first problem into a ConfigError that names the key (the CLI exits 2 with it). Kept apart from
 * config.ts so that the agent reads its config without the server's modules (and with zod/mini:
 * ./read.ts).
 */
import * as z from "zod";
import { configError, Problem, shown } from "./read.ts";

export { ConfigError, Problem, readYamlMapping, shown } from "./read.ts";

/** A value read by `read`, which throws Problem for a value that does not fit (a ConfigError passes through). */
export const custom = <T>(read: (value: unknown) => T) =>
  z.unknown().transform((value, ctx): T => {
    try {
      return read(value);
    } catch (error) {
      if (!(error instanceof Problem)) throw error;
      ctx.addIssue({ code: "custom", message: error.what, path: error.path });
      return z.NEVER;
    }
  });

export const string = () => z.string({ error: (iss) => `expected a string, got ${shown(iss.input)}` });
export const boolean = () => z.boolean({ error: (iss) => `expected true or false, got ${shown(iss.input)}` });
export const oneOf = <const T extends readonly [string, ...string[]]>(...values: T) =>
  z.enum(values, { error: (iss) => `expected one of ${values.join(", ")}, got ${shown(iss.input)}` });
export const integer = (min: number, max = Number.MAX_SAFE_INTEGER) => {
  const error = (iss: { input?: unknown }) => `expected an integer from ${min} to ${max}, got ${shown(iss.input)}`;
  // One schema and its two bounds as checks: each chained `.int()`, `.min()`, `.max()` would build another copy, at every start.
  return z.int({ error }).check(z.gte(min, { error }), z.lte(max, { error }));
};
export const positive = () => {
  const error = (iss: { input?: unknown }) => `expected a number greater than 0, got ${shown(iss.input)}`;
  return z.number({ error }).positive({ error });
};
/** A list of strings: a command's argv (never run through a shell). */
export const argv = () =>
  custom((value): string[] => {
    if (Array.isArray(value) && value.every((x) => typeof x === "string")) return value;
    throw new Problem("expected a list of strings (argv, no shell)");
  });

/** A section: a mapping of its keys (absent or empty: every default); an unknown key is an error. */
export const section = <Shape extends z.ZodRawShape>(shape: Shape, what = "expected a mapping") =>
  z.preprocess((value) => value ?? {}, z.strictObject(shape, { error: (iss) => (iss.code === "invalid_type" ? what : undefined) })).prefault({});

/**
 * `input` read by `schema`, or a ConfigError naming the first key that does not fit (an unknown
 * key before a bad value): `name(path)` turns the key's path into what the message calls it.
 */
export function parseWith<T extends z.ZodType>(schema: T, input: unknown, name: (path: Array<PropertyKey>) => string): z.output<T> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw configError(result.error.issues, name);
}
