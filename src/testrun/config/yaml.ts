/**
 * The test-config YAML dialect: YAML 1.1 like PyYAML's safe
 * loader, merge keys, duplicate keys (last wins, first position kept), no `y`/`n` booleans,
 * dates kept as strings, and one anchor namespace shared by every file of a load.
 *
 * We walk the `yaml` package's syntax tree ourselves instead of calling toJS(): that is what
 * lets an alias refer to an anchor of an earlier file, keeps YAML 1.1 key types (`000:` is the
 * number 0), and makes aliases share one value instead of copying it (so an alias bomb costs
 * memory linear in the text; the walkers that follow aliases count their steps, see Budget).
 */
import { isAlias, isMap, isPair, isScalar, isSeq, parseDocument, type Document, type Node, type ParseOptions, type DocumentOptions, type SchemaOptions, type Tags } from "yaml";

/** A mapping key: YAML 1.1 scalars keep their type (an integer key stays a number). */
export type YKey = string | number | boolean | null;
/** A parsed value. Mappings are Maps so that key types and insertion order survive. */
export type YValue = string | number | boolean | null | YValue[] | YMap;
export type YMap = Map<YKey, YValue>;

export const isYMap = (v: unknown): v is YMap => v instanceof Map;
export const isContainer = (v: unknown): v is YMap | YValue[] => v instanceof Map || Array.isArray(v);

/** Where in which config file a problem is (1-based line), when known. */
export interface SourcePlace {
  file: string;
  line: number;
}

/** A config is unusable; the message says where and why, `at` the same for programs. */
export class YamlError extends Error {
  readonly at: SourcePlace | undefined;
  constructor(message: string, at?: SourcePlace) {
    super(message);
    this.at = at;
  }
}

/** The 1-based line of a character offset. */
export function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = text.indexOf("\n"); i >= 0 && i < offset; i = text.indexOf("\n", i + 1)) line++;
  return line;
}

/** Nesting deeper than this is refused (the parsers here recurse). */
export const MAX_DEPTH = 128;

/**
 * Counts steps of every walk that follows aliases. Shared values make a tree that is small in
 * memory but may be exponentially large when walked (`a: &a [x,x,x]`, `b: &b [*a,*a,*a]`, ...).
 */
export class Budget {
  private left: number;
  private readonly limit: number;
  constructor(limit = 2_000_000) {
    this.left = limit;
    this.limit = limit;
  }
  tick(n = 1): void {
    this.left -= n;
    if (this.left < 0) throw new YamlError(`config is too large once aliases are expanded (more than ${this.limit} nodes)`);
  }
}

// PyYAML's booleans: like the package's YAML 1.1 ones but without y/Y/n/N.
const trueTag = {
  identify: (v: unknown) => v === true,
  default: true,
  tag: "tag:yaml.org,2002:bool",
  test: /^(?:[Yy]es|YES|[Tt]rue|TRUE|[Oo]n|ON)$/,
  resolve: () => true,
};
const falseTag = {
  identify: (v: unknown) => v === false,
  default: true,
  tag: "tag:yaml.org,2002:bool",
  test: /^(?:[Nn]o|NO|[Ff]alse|FALSE|[Oo]ff|OFF)$/,
  resolve: () => false,
};
// Dates stay strings; binary, sets, omap and pairs would give values a config cannot use.
const DROPPED = new Set(["tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:binary", "tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs"]);

// PyYAML's exponent floats need a dot and a signed exponent (`1.0e+3`); `1e3` stays a string.
const pyFloatExp = (tag: Tags[number]): Tags[number] => {
  const t = tag as { tag?: string; test?: RegExp };
  if (t.tag !== "tag:yaml.org,2002:float" || !t.test || !/\[eE\]/.test(t.test.source)) return tag;
  return { ...(tag as object), test: /^[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*[eE][-+][0-9]+$/ } as Tags[number];
};

const OPTIONS: ParseOptions & DocumentOptions & SchemaOptions = {
  version: "1.1",
  merge: true,
  uniqueKeys: false,
  prettyErrors: false,
  intAsBigInt: false,
  customTags: (tags: Tags) => [...tags.filter((t) => !DROPPED.has((t as { tag: string }).tag)).map(pyFloatExp), trueTag, falseTag] as Tags,
};

const firstLine = (message: string) => (/call stack/i.test(message) ? "the document nests too deeply" : message.split("\n")[0]);

/** Parses the syntax only (no alias resolution: an include may use its includer's anchors). */
function parseSyntax(text: string, file: string): Document.Parsed {
  let doc: Document.Parsed;
  try {
    doc = parseDocument(text, OPTIONS);
  } catch (error) {
    // A stack overflow on absurd nesting, or any parser failure: the text is not usable.
    throw new YamlError(`${file}: invalid YAML: ${firstLine((error as Error).message)}`);
  }
  if (doc.errors.length > 0) {
    const offset = doc.errors[0].pos?.[0];
    const line = offset === undefined ? undefined : lineAt(text, offset);
    const at = line === undefined ? "" : ` (line ${line})`;
    throw new YamlError(`${file}: invalid YAML: ${firstLine(doc.errors[0].message)}${at}`, line === undefined ? undefined : { file, line });
  }
  return doc;
}

/** Upload check: well-formed YAML, one document. Returns the problem (and its line when known), or undefined. */
export function yamlSyntaxProblem(text: string): { message: string; line?: number } | undefined {
  try {
    const doc = parseSyntax(text, "config");
    checkDepth(doc.contents as Node | null, 0);
    return undefined;
  } catch (error) {
    const line = error instanceof YamlError ? error.at?.line : undefined;
    return { message: (error as Error).message.replace(/^config: invalid YAML: /, ""), ...(line === undefined ? {} : { line }) };
  }
}

function checkDepth(node: Node | null | undefined, depth: number): void {
  if (depth > MAX_DEPTH) throw new YamlError(`nesting deeper than ${MAX_DEPTH} levels`);
  if (isMap(node)) for (const pair of node.items) (checkDepth(pair.key as Node, depth + 1), checkDepth(pair.value as Node, depth + 1));
  else if (isSeq(node)) for (const item of node.items) checkDepth(item as Node, depth + 1);
}

/** Where an anchored value sits, so the registry can follow an override that replaced it. */
interface AnchorSlot {
  name: string;
  parent: YMap | YValue[];
  key: YKey;
}

/** The anchor namespace of one load: later definitions shadow earlier ones from then on. */
export class AnchorRegistry {
  private readonly values = new Map<string, YValue>();
  has(name: string): boolean {
    return this.values.has(name);
  }
  get(name: string): YValue {
    return this.values.get(name) as YValue;
  }
  set(name: string, value: YValue): void {
    this.values.set(name, value);
  }
  /** Re-reads the given anchors from where they were defined (after overrides changed the file). */
  refresh(slots: AnchorSlot[]): void {
    for (const slot of slots) {
      const value = slot.parent instanceof Map ? slot.parent.get(slot.key) : slot.parent[slot.key as number];
      if (value !== undefined) this.values.set(slot.name, value);
    }
  }
}

export interface ParsedFile {
  /** The document's value (null for an empty file). */
  root: YValue;
  /** The anchors this file defined, for AnchorRegistry.refresh. */
  anchors: AnchorSlot[];
}

/** Python's str() of a key, which is how keys appear in dotted paths and names. */
export function keyText(key: YKey): string {
  if (key === null) return "None";
  if (key === true) return "True";
  if (key === false) return "False";
  return String(key);
}

/**
 * Parses one file of a load against the shared anchor registry: aliases to anchors of earlier
 * files resolve, plain aliases share the anchored value, merge keys copy the anchored mapping's
 * pairs now (nested values stay shared).
 */
export function parseConfigFile(text: string, file: string, registry: AnchorRegistry, budget: Budget): ParsedFile {
  const doc = parseSyntax(text, file);
  const anchors: AnchorSlot[] = [];

  const placeOf = (node: Node | null | undefined): SourcePlace | undefined => {
    const offset = node?.range?.[0];
    return offset === undefined ? undefined : { file, line: lineAt(text, offset) };
  };
  const where = (node: Node | null | undefined) => {
    const place = placeOf(node);
    return place ? `${file} line ${place.line}` : file;
  };
  /** A problem at `node`: its place in the message and in `at`. */
  const problem = (node: Node | null | undefined, message: string) => new YamlError(`${where(node)}: ${message}`, placeOf(node));

  const alias = (name: string, node: Node): YValue => {
    if (!registry.has(name)) throw problem(node, `found undefined alias '${name}'`);
    return registry.get(name);
  };

  const convertKey = (node: unknown): YKey => {
    if (node === null || node === undefined) return null;
    if (isAlias(node)) {
      const value = alias(node.source, node);
      if (isContainer(value)) throw problem(node, "a mapping key must be a scalar");
      return value;
    }
    if (isScalar(node)) return scalar(node.value);
    throw problem(node as Node, "a mapping key must be a scalar");
  };

  const scalar = (value: unknown): string | number | boolean | null => {
    if (value === null || value === undefined) return null;
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") return value;
    if (typeof value === "symbol") return value.description ?? "";
    return String(value);
  };

  const isMergeKey = (node: unknown) => isScalar(node) && typeof node.value === "symbol";

  const mergeSources = (node: unknown, depth: number): YMap[] => {
    const one = (n: unknown): YMap => {
      const value = isAlias(n) ? alias(n.source, n) : convert(n as Node, depth + 1, null);
      if (!isYMap(value)) throw problem(n as Node, "a merge key needs a mapping or a list of mappings");
      return value;
    };
    // PyYAML merges a list's mappings last-first, so the first mapping of the list wins.
    if (isSeq(node)) return node.items.map(one).reverse();
    return [one(node)];
  };

  const convert = (node: Node | null | undefined, depth: number, slot: { parent: YMap | YValue[]; key: YKey } | null): YValue => {
    budget.tick();
    if (depth > MAX_DEPTH) throw problem(node, `nesting deeper than ${MAX_DEPTH} levels`);
    if (node === null || node === undefined) return null;
    if (isAlias(node)) return alias(node.source, node);
    let value: YValue;
    if (isScalar(node)) {
      value = scalar(node.value);
    } else if (isMap(node)) {
      const map: YMap = new Map();
      const merged: YMap[] = [];
      const own: Array<[YKey, Node | null]> = [];
      for (const pair of node.items) {
        if (!isPair(pair)) continue;
        if (isMergeKey(pair.key)) for (const source of mergeSources(pair.value, depth)) merged.push(source);
        else own.push([convertKey(pair.key), pair.value as Node | null]);
      }
      for (const source of merged) {
        budget.tick(source.size);
        for (const [k, v] of source) map.set(k, v);
      }
      for (const [k, v] of own) map.set(k, convert(v, depth + 1, { parent: map, key: k }));
      value = map;
    } else if (isSeq(node)) {
      const list: YValue[] = [];
      node.items.forEach((item, i) => list.push(convert(item as Node, depth + 1, { parent: list, key: i })));
      value = list;
    } else {
      throw problem(node, "unsupported YAML node");
    }
    if (node.anchor) {
      registry.set(node.anchor, value);
      if (slot) anchors.push({ name: node.anchor, ...slot });
    }
    return value;
  };

  return { root: convert(doc.contents as Node | null, 0, null), anchors };
}

/** Parses a standalone YAML text (request overrides) in the same dialect, with its own anchors. */
export function parseStandalone(text: string, what: string): YValue {
  return parseConfigFile(text, what, new AnchorRegistry(), new Budget(200_000)).root;
}

/** A plain JSON-like copy (Maps become objects, keys as Python would print them). */
export function toPlain(value: YValue, budget: Budget, depth = 0): unknown {
  budget.tick();
  if (depth > MAX_DEPTH * 2) throw new YamlError(`nesting deeper than ${MAX_DEPTH * 2} levels (a recursive alias?)`);
  if (Array.isArray(value)) return value.map((v) => toPlain(v, budget, depth + 1));
  if (value instanceof Map) {
    const out: Record<string, unknown> = {};
    // defineProperty: a key named __proto__ must stay a plain key.
    for (const [k, v] of value) Object.defineProperty(out, keyText(k), { value: toPlain(v, budget, depth + 1), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return value;
}

/** The reverse of toPlain for JSON input (Variant B object overrides). */
export function fromPlain(value: unknown, depth = 0): YValue {
  if (depth > MAX_DEPTH) throw new YamlError(`nesting deeper than ${MAX_DEPTH} levels`);
  if (Array.isArray(value)) return value.map((v) => fromPlain(v, depth + 1));
  if (value !== null && typeof value === "object") {
    const map: YMap = new Map();
    for (const [k, v] of Object.entries(value)) map.set(k, fromPlain(v, depth + 1));
    return map;
  }
  if (value === undefined) return null;
  return value as string | number | boolean | null;
}
