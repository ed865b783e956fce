import type { ModuleDef, Params, ParamSpec, ParamType } from "./types.ts";

/** Params every entry may carry (2.2, 18.1): `override` hints stay in the params and are ignored. */
const COMMON_IGNORED = new Set(["override"]);

/** A YAML mapping as the module parameters see it (a plain object). */
export const isMapping = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isScalar = (v: unknown) => typeof v === "string" || typeof v === "number" || typeof v === "boolean";

function checkType(type: ParamType, v: unknown): string | undefined {
  switch (type) {
    case "string":
      return typeof v === "string" || typeof v === "number" ? undefined : "expected a string";
    case "number":
      return typeof v === "number" && Number.isFinite(v) ? undefined : "expected a number";
    case "integer":
      return typeof v === "number" && Number.isInteger(v) ? undefined : "expected an integer";
    case "boolean":
      return typeof v === "boolean" ? undefined : "expected true or false";
    case "command":
      if (typeof v === "string") return v.trim() ? undefined : "expected a non-empty command";
      if (Array.isArray(v)) return v.length > 0 && v.every(isScalar) ? undefined : "expected a non-empty list of arguments";
      return "expected a command string or a list of arguments";
    case "strings":
      return typeof v === "string" || (Array.isArray(v) && v.every((x) => typeof x === "string")) ? undefined : "expected a string or a list of strings";
    case "integers":
      return Number.isInteger(v) || (Array.isArray(v) && v.length > 0 && v.every((x) => Number.isInteger(x))) ? undefined : "expected an integer or a list of integers";
    case "mapping":
      return isMapping(v) ? undefined : "expected a mapping";
    case "list":
      return Array.isArray(v) ? undefined : "expected a list";
    case "scalar":
      return isScalar(v) ? undefined : "expected a scalar value";
    case "any":
      return undefined;
  }
}

export interface ParamCheck {
  error?: string;
  /** Unknown params, for the run's warnings (18.1: ignored with a warning). */
  unknown: string[];
}

/** Validates an entry's params against the module's schema (at trigger: errors are a 422). */
export function checkParams(module: ModuleDef, params: Params): ParamCheck {
  const unknown = Object.keys(params).filter((k) => !(k in module.params) && !COMMON_IGNORED.has(k));
  for (const [name, spec] of Object.entries(module.params) as [string, ParamSpec][]) {
    const value = params[name];
    if (value === undefined || value === null) {
      if (spec.required) return { error: `parameter '${name}' is required`, unknown };
      continue;
    }
    const problem = checkType(spec.type, value);
    if (problem) return { error: `parameter '${name}': ${problem}`, unknown };
    if (spec.oneOf && !spec.oneOf.includes(String(value))) return { error: `parameter '${name}': expected one of ${spec.oneOf.join(", ")}`, unknown };
  }
  const extra = module.validate?.(params);
  return extra ? { error: extra, unknown } : { unknown };
}

// Accessors for validated params.
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
