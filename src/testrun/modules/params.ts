import * as z from "zod";

/** An entry's parameters as written in the config (after overrides), `machines` removed. */
export type Params = Record<string, unknown>;

/** A YAML mapping as the module parameters see it (a plain object). */
export const isMapping = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** The kinds of value a parameter takes; each is one zod type below, and a name in docs/modules.md. */
export type ParamType = "string" | "number" | "integer" | "boolean" | "command" | "strings" | "integers" | "mapping" | "list" | "scalar" | "any";

const scalar = () => z.union([z.string(), z.number(), z.boolean()], { error: "expected a scalar value" });
const KINDS: Record<ParamType, () => z.ZodType> = {
  // YAML reads `0x1c`, `20` or `1.0` as numbers; a string parameter takes them as written.
  string: () => z.union([z.string(), z.number()], { error: "expected a string" }),
  number: () => z.number({ error: "expected a number" }),
  integer: () => z.int({ error: "expected an integer" }),
  boolean: () => z.boolean({ error: "expected true or false" }),
  command: () =>
    z.union(
      [
        z.string().refine((s) => s.trim() !== "", "expected a non-empty command"),
        z.array(scalar(), { error: "expected a non-empty list of arguments" }).min(1, "expected a non-empty list of arguments"),
      ],
      { error: "expected a command string or a list of arguments" },
    ),
  strings: () => z.union([z.string(), z.array(z.string())], { error: "expected a string or a list of strings" }),
  integers: () => z.union([z.int(), z.array(z.int()).min(1, "expected an integer or a list of integers")], { error: "expected an integer or a list of integers" }),
  mapping: () => z.record(z.string(), z.unknown(), { error: "expected a mapping" }),
  list: () => z.array(z.unknown(), { error: "expected a list" }),
  scalar,
  any: () => z.unknown(),
};

/** What docs/modules.md says of a parameter. */
export interface ParamDoc {
  type: string;
  description: string;
  /** The value the module uses when the parameter is left out. */
  default?: unknown;
}
export const paramDocs = z.registry<ParamDoc>();

/** A parameter the entry must give. */
export const required = (type: ParamType, description: string) => KINDS[type]().register(paramDocs, { type, description });

/** A parameter the entry may leave out; `fallback` is what the module then uses (documented, applied by the module). */
export const optional = (type: ParamType, description: string, fallback?: unknown) =>
  KINDS[type]()
    .optional()
    .register(paramDocs, { type, description, ...(fallback === undefined ? {} : { default: fallback }) });

/** An optional string parameter limited to `values`. */
export const choice = (values: readonly string[], description: string, fallback?: string) =>
  KINDS.string()
    .refine((v) => values.includes(String(v)), `expected one of ${values.join(", ")}`)
    .optional()
    .register(paramDocs, { type: values.map((v) => `\`${v}\``).join(" \\| "), description, ...(fallback === undefined ? {} : { default: fallback }) });

/**
 * A module's parameters: one zod object, the single declaration that validation and
 * docs/modules.md read. It is built from `shape` when first read, so that a server start, which
 * validates no entry, builds none of the modules' schemas.
 */
export interface ParamSchema {
  readonly object: z.ZodObject<Record<string, z.ZodType>>;
}
export function paramSchema(shape: () => Record<string, z.ZodType>): ParamSchema {
  let object: z.ZodObject<Record<string, z.ZodType>> | undefined;
  return {
    get object() {
      return (object ??= z.object(shape()));
    },
  };
}

// Accessors for validated params.
/** Any of `keys` is given (a null value is absent, as at validation). */
export const given = (p: Params, ...keys: string[]): boolean => keys.some((k) => p[k] !== undefined && p[k] !== null);
export const str = (p: Params, k: string, d?: string): string | undefined => (p[k] === undefined || p[k] === null ? d : String(p[k]));
export const num = (p: Params, k: string, d?: number): number | undefined => (typeof p[k] === "number" ? (p[k] as number) : d);
export const bool = (p: Params, k: string, d?: boolean): boolean | undefined => (typeof p[k] === "boolean" ? (p[k] as boolean) : d);
export const list = (p: Params, k: string): string[] => {
  const v = p[k];
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v.map(String) : [String(v)];
};
export const ints = (p: Params, k: string, d: number[]): number[] => {
  const v = p[k];
  if (v === undefined || v === null) return d;
  return Array.isArray(v) ? v.map(Number) : [Number(v)];
};
export const command = (p: Params, k = "command"): string | string[] | undefined => {
  const v = p[k];
  if (v === undefined || v === null) return undefined;
  return Array.isArray(v) ? v.map(String) : String(v);
};
export const envOf = (p: Params): Record<string, string> => {
  const v = p.env;
  if (!isMapping(v)) return {};
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, x === null ? "" : String(x)]));
};

/** Checks that every entry of a regex param compiles (at trigger). */
export function regexError(p: Params, ...keys: string[]): string | undefined {
  for (const k of keys) {
    for (const source of list(p, k)) {
      try {
        new RegExp(source);
      } catch (error) {
        return `parameter '${k}': invalid regular expression: ${(error as Error).message}`;
      }
    }
  }
  return undefined;
}
