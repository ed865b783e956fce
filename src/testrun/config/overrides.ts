/**
 * Overrides and override hints: dotted-path resolution,
 * in-file override keys, hint collection, the Variant A string form and the object deep merge.
 */
import { Budget, isContainer, isYMap, keyText, parseStandalone, YamlError, type YKey, type YMap, type YValue } from "./yaml.ts";

/** One override: a dotted path and the value to store there. */
export interface Override {
  path: string;
  value: YValue;
  /** Where it came from: the request, or the config file that holds it (for messages). */
  origin: "request" | { file: string };
}

export type ApplyResult = "applied" | "not_found" | "not_container";

const DECIMAL = /^[0-9]+$/;

/** One step of a dotted path: a string key, else a decimal segment as list index or integer key. */
function step(node: YMap | YValue[], segment: string): YValue | undefined {
  if (segment === "") return undefined;
  if (isYMap(node)) {
    if (node.has(segment)) return node.get(segment);
    if (DECIMAL.test(segment)) {
      const n = Number(segment);
      if (node.has(n)) return node.get(n);
    }
    return undefined;
  }
  if (DECIMAL.test(segment)) {
    const n = Number(segment);
    if (n < node.length) return node[n];
  }
  return undefined;
}

/**
 * Applies `value` at `path` inside `root`: every intermediate key must exist; the last
 * segment replaces or adds a key of a mapping, or replaces an existing element of a list.
 */
export function applyPath(root: YValue, path: string, value: YValue): ApplyResult {
  const segments = path.split(".");
  if (!isContainer(root)) return "not_container";
  let node: YMap | YValue[] = root;
  for (const segment of segments.slice(0, -1)) {
    const next = step(node, segment);
    if (next === undefined) return "not_found";
    if (!isContainer(next)) return "not_container";
    node = next;
  }
  const last = segments[segments.length - 1];
  if (last === "") return "not_found";
  if (isYMap(node)) {
    node.set(last, value);
    return "applied";
  }
  if (DECIMAL.test(last) && Number(last) < node.length) {
    node[Number(last)] = value;
    return "applied";
  }
  return "not_found";
}

const join = (path: string, key: string) => (path === "" ? key : `${path}.${key}`);

/**
 * Removes every in-file override key (a string key containing `.`) from `root` and returns
 * them in document order, each with its full path (the key prefixed by its mapping's path).
 * Recurses into the removed values too, since they may hold override keys of their own.
 */
export function collectInFileOverrides(root: YValue, file: string, budget: Budget): Override[] {
  const found: Override[] = [];
  const walk = (node: YValue, path: string, depth: number) => {
    budget.tick();
    if (depth > 256) throw new YamlError(`${file}: nesting deeper than 256 levels (a recursive alias?)`);
    if (isYMap(node)) {
      for (const [key, value] of [...node]) {
        const full = join(path, keyText(key));
        if (typeof key === "string" && key.includes(".")) {
          node.delete(key);
          found.push({ path: full, value, origin: { file } });
        }
        walk(value, full, depth + 1);
      }
    } else if (Array.isArray(node)) {
      node.forEach((value, i) => walk(value, `${path}.${i}`, depth + 1));
    }
  };
  walk(root, "", 0);
  return found;
}

/**
 * The override hints of one parsed file, on the raw document: every `override`
 * key's string or list of strings, relative to the mapping that holds it, in document order.
 */
export function collectHints(root: YValue, file: string, budget: Budget): string[] {
  const hints: string[] = [];
  const walk = (node: YValue, path: string, depth: number) => {
    budget.tick();
    if (depth > 256) throw new YamlError(`${file}: nesting deeper than 256 levels (a recursive alias?)`);
    if (isYMap(node)) {
      for (const [key, value] of node) {
        const full = join(path, keyText(key));
        if (key === "override") {
          const bad = () => new YamlError(`${full}: override hint must be a string or a list of strings`);
          if (Array.isArray(value)) {
            for (const item of value) {
              if (isContainer(item)) throw bad();
              hints.push(join(path, keyText(item as YKey)));
            }
          } else if (typeof value === "string") {
            hints.push(join(path, value));
          } else {
            throw bad();
          }
        }
        walk(value, full, depth + 1);
      }
    } else if (Array.isArray(node)) {
      node.forEach((value, i) => walk(value, `${path}.${i}`, depth + 1));
    }
  };
  walk(root, "", 0);
  return hints;
}

/** Request overrides are malformed (400 `invalid overrides: ...`). */
export class OverrideError extends Error {}

/** Python's str.splitlines() separators. */
const LINE_BREAK = /\r\n|[\n\v\f\r\x1c\x1d\x1e\x85\u2028\u2029]/;

/**
 * The Variant A string form: split into lines (kept on the run), re-joined with `\n` and
 * parsed as one YAML 1.1 mapping of dotted paths to values.
 */
export function parseOverrideString(text: string): { lines: string[]; overrides: Override[] } {
  const lines = text.split(LINE_BREAK);
  if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
  let root: YValue;
  try {
    root = parseStandalone(lines.join("\n"), "overrides");
  } catch (error) {
    throw new OverrideError((error as Error).message.replace(/^overrides: /, ""));
  }
  if (root === null) return { lines, overrides: [] };
  if (!isYMap(root)) throw new OverrideError("expected a mapping of dotted paths to values, one `path: value` per line");
  const overrides: Override[] = [];
  for (const [key, value] of root) {
    if (typeof key !== "string") throw new OverrideError(`override keys must be strings, got ${keyText(key)}`);
    overrides.push({ path: key, value, origin: "request" });
  }
  return { lines, overrides };
}

/** Finds the key of `map` that a patch key addresses: the string itself, or a decimal as an integer key. */
function mapKey(map: YMap, key: YKey): YKey | undefined {
  if (map.has(key)) return key;
  if (typeof key === "string" && DECIMAL.test(key) && map.has(Number(key))) return Number(key);
  return undefined;
}

/** Deep copy of a value (shared anchored values must not be changed through a merge patch copy). */
function copy(value: YValue, budget: Budget): YValue {
  budget.tick();
  if (Array.isArray(value)) return value.map((v) => copy(v, budget));
  if (isYMap(value)) return new Map([...value].map(([k, v]) => [k, copy(v, budget)] as [YKey, YValue]));
  return value;
}

/**
 * The object form: mappings merge key by key, a list merges with a mapping of decimal
 * keys element by element (the length appends; beyond is an error), anything else replaces.
 */
export function deepMerge(base: YValue | undefined, patch: YValue, path: string, budget: Budget): YValue {
  budget.tick();
  if (isYMap(base) && isYMap(patch)) {
    for (const [k, v] of patch) {
      const existing = mapKey(base, k);
      const at = join(path, keyText(k));
      if (existing === undefined) base.set(k, copy(v, budget));
      else base.set(existing, deepMerge(base.get(existing), v, at, budget));
    }
    return base;
  }
  if (Array.isArray(base) && isYMap(patch) && [...patch.keys()].every((k) => typeof k === "string" && DECIMAL.test(k))) {
    for (const [k, v] of patch) {
      const index = Number(k);
      const at = join(path, String(index));
      if (index < base.length) base[index] = deepMerge(base[index], v, at, budget);
      else if (index === base.length) base.push(copy(v, budget));
      else throw new OverrideError(`index ${index} is out of range at '${path}' (the list has ${base.length} elements)`);
    }
    return base;
  }
  return copy(patch, budget);
}
