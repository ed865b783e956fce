/**
 * One load of a test config: the main file, then its
 * includes depth-first in list order, with one anchor namespace and overrides passed down.
 */
import type { ConfigSource } from "../plan.ts";
import { isConfigName } from "./names.ts";
import { collectHints, collectInFileOverrides, applyPath, type Override } from "./overrides.ts";
import { AnchorRegistry, Budget, isYMap, keyText, parseConfigFile, YamlError, type SourcePlace, type YKey, type YMap, type YValue } from "./yaml.ts";


/** Hostile-input limits for one load. */
export const LOAD_LIMITS = {
  /** Files read in one load (main file plus includes). */
  maxFiles: 64,
  /** Bytes read in one load. */
  maxBytes: 16 * 1024 * 1024,
};

export interface LoadResult {
  /** The main file's own document after its overrides were applied (for top-level keys). */
  root: YMap;
  /** Effective `tests`, `metadata`, `test-suites`: includes first, then the file's own. */
  tests: YMap;
  metadata: YMap;
  suites: YMap;
  /** Suite names in first-definition order over the load order. */
  suiteOrder: string[];
  /** Override hints of every file, main file first, includes depth-first. */
  hints: string[];
  /** Overrides no file could apply, in order (request ones are an error for the caller). */
  unconsumed: Override[];
  /** Store name -> text of every file read. */
  files: Record<string, string>;
}

/** A file cannot be loaded; `missing` marks the main file being absent (404 rather than 422). */
export class LoadError extends Error {
  readonly missing: boolean;
  /** Where the problem is, when known (an include line, a YAML error). */
  readonly at: SourcePlace | undefined;
  constructor(message: string, missing = false, at?: SourcePlace) {
    super(message);
    this.missing = missing;
    this.at = at;
  }
}

/**
 * The line of `file` that names the include `name`: the first line after `includes:` (or that
 * line itself, for the flow form) that contains it. The parsed document has no positions left.
 */
function includeLine(text: string, file: string, name: string): SourcePlace | undefined {
  const lines = text.split("\n");
  const start = lines.findIndex((l) => /^\s*includes\s*:/.test(l));
  if (start < 0) return undefined;
  for (let i = start; i < lines.length; i++) if (lines[i].includes(name)) return { file, line: i + 1 };
  return { file, line: start + 1 };
}

const KEYS = { tests: "tests", metadata: "metadata", suites: "test-suites", includes: "includes" } as const;

/** Loads `main` with `requestOverrides`. Throws LoadError. */
export function loadConfigFiles(source: ConfigSource, main: string, requestOverrides: Override[] = []): LoadResult {
  const registry = new AnchorRegistry();
  const budget = new Budget();
  const files: Record<string, string> = {};
  const done = new Set<string>();
  const hints: string[] = [];
  const suiteOrder = new Set<string>();
  let bytes = 0;

  const sectionOf = (root: YMap, key: string, file: string): YMap => {
    const value = root.get(key);
    if (value === undefined || value === null) return new Map();
    if (!isYMap(value)) throw new LoadError(`${file}: '${key}' must be a mapping`);
    return value;
  };

  const includesOf = (root: YMap, file: string): string[] => {
    const value = root.get(KEYS.includes);
    if (value === undefined || value === null) return [];
    // A single string is a one-element list.
    const list = typeof value === "string" ? [value] : value;
    if (!Array.isArray(list)) throw new LoadError(`${file}: 'includes' must be a list of config names`);
    return list.map((item) => {
      if (typeof item !== "string") throw new LoadError(`${file}: 'includes' must be a list of config names`);
      if (!isConfigName(item)) throw new LoadError(`${file}: invalid include name '${item}' (plain config names from the store only)`);
      return item;
    });
  };

  /** Loads `name`; returns its effective sections and the overrides still unconsumed. */
  const load = (name: string, incoming: Override[], chain: string[]): { root: YMap; tests: YMap; metadata: YMap; suites: YMap; rest: Override[] } | undefined => {
    const includer = chain[chain.length - 1];
    const atInclude = () => (includer === undefined ? undefined : includeLine(files[includer] ?? "", includer, name));
    if (chain.includes(name)) throw new LoadError(`include cycle: ${[...chain.slice(chain.indexOf(name)), name].join(" -> ")}`, false, atInclude());
    if (done.has(name)) return undefined; // a diamond: loaded once
    if (Object.keys(files).length >= LOAD_LIMITS.maxFiles) throw new LoadError(`more than ${LOAD_LIMITS.maxFiles} files in one load`);
    const text = source.read(name);
    if (text === undefined) {
      if (chain.length === 0) throw new LoadError("Configuration file not found", true);
      throw new LoadError(`${includer}: included config '${name}' not found`, false, atInclude());
    }
    bytes += Buffer.byteLength(text);
    if (bytes > LOAD_LIMITS.maxBytes) throw new LoadError(`the config and its includes exceed ${LOAD_LIMITS.maxBytes} bytes`);
    files[name] = text;

    const parsed = parseConfigFile(text, name, registry, budget);
    const root: YMap = parsed.root === null ? new Map() : (parsed.root as YMap);
    if (!isYMap(root)) throw new LoadError(`${name}: the top level must be a mapping`);
    for (const hint of collectHints(root, name, budget)) hints.push(hint); // no spread: may be huge

    // In-file overrides, updated by the incoming ones (same path: incoming wins,
    // first position kept), applied in that order; applied ones are consumed.
    const ordered = new Map<string, Override>();
    for (const o of collectInFileOverrides(root, name, budget)) ordered.set(o.path, o);
    for (const o of incoming) ordered.set(o.path, o);
    let rest: Override[] = [];
    for (const o of ordered.values()) if (applyPath(root, o.path, o.value) !== "applied") rest.push(o);
    registry.refresh(parsed.anchors); // step 4: later files see the new values

    const tests: YMap = new Map();
    const metadata: YMap = new Map();
    const suites: YMap = new Map();
    const own = { tests: sectionOf(root, KEYS.tests, name), metadata: sectionOf(root, KEYS.metadata, name), suites: sectionOf(root, KEYS.suites, name) };
    for (const key of own.suites.keys()) suiteOrder.add(keyText(key));

    // Step 5: what is left goes to each include in order; includes come first in the result.
    for (const include of includesOf(root, name)) {
      const sub = load(include, rest, [...chain, name]);
      if (!sub) continue;
      rest = sub.rest;
      mergeInto(tests, sub.tests);
      mergeInto(metadata, sub.metadata);
      mergeInto(suites, sub.suites);
    }
    mergeInto(tests, own.tests);
    mergeInto(metadata, own.metadata);
    mergeInto(suites, own.suites);
    done.add(name);
    return { root, tests, metadata, suites, rest };
  };

  try {
    const result = load(main, requestOverrides, [])!;
    return { root: result.root, tests: result.tests, metadata: result.metadata, suites: result.suites, suiteOrder: [...suiteOrder], hints, unconsumed: result.rest, files };
  } catch (error) {
    if (error instanceof LoadError) throw error;
    if (error instanceof YamlError) throw new LoadError(error.message, false, error.at);
    if (error instanceof RangeError) throw new LoadError(`${main}: the config nests too deeply`);
    throw error;
  }

}

// Later definitions replace the value and keep the first position (Map.set does exactly that).
function mergeInto(target: YMap, source: YMap): void {
  for (const [k, v] of source) target.set(k as YKey, v as YValue);
}
