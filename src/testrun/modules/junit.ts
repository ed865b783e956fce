import { basename, isAbsolute, join, relative, resolve, sep } from "node:path";
import { XMLParser } from "fast-xml-parser";
import type { TestFiles } from "../engine/test-files.ts";
import { describeExit, type ProcessResult } from "../../util/process.ts";
import { safeArtifactName } from "./artifact-names.ts";
import { resolveCwd } from "./exec.ts";
import { choice, command, envOf, ints, num, optional, paramSchema, str } from "./params.ts";
import { fail, pass, skip, type CaseDef, type EntryContext, type ModuleDef, type Outcome } from "./types.ts";

const XML_LIMIT = 16 * 1024 * 1024;

interface JunitCase {
  name: string;
  outcome: Outcome;
}

interface JunitState {
  process?: ProcessResult;
  timeoutMs: number;
  files: string[];
  parseErrors: string[];
  cases: JunitCase[];
  suiteName?: string;
}

/** Case names may only hold pattern identifier characters; the rest becomes `_`. */
export const sanitizeCaseName = (name: string): string => name.replace(/[^\p{L}\p{N}_:+\-.[\]\\/]/gu, "_") || "_";

const globPart = (part: string) => new RegExp(`^${part.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(/\?/g, "[^/]")}$`);

/** Expands a glob (`*`, `?`, `**`) against the file system as the test's user (`files`); plain paths pass through when they exist. */
export async function globFiles(files: TestFiles, cwd: string, pattern: string): Promise<string[]> {
  const absolute = isAbsolute(pattern);
  const parts = pattern.split("/").filter((p) => p !== "" && p !== ".");
  const found = new Set<string>();
  const walk = async (dir: string, i: number): Promise<void> => {
    if (i === parts.length) {
      if ((await files.stat(dir, true).catch(() => undefined))?.type === "file") found.add(dir);
      return;
    }
    const part = parts[i];
    if (part === "**") {
      await walk(dir, i + 1);
      for (const entry of await files.list(dir).catch(() => [])) if (entry.dir) await walk(join(dir, entry.name), i);
      return;
    }
    if (!/[*?]/.test(part)) return walk(join(dir, part), i + 1);
    const regex = globPart(part);
    for (const entry of await files.list(dir).catch(() => [])) if (regex.test(entry.name)) await walk(join(dir, entry.name), i + 1);
  };
  await walk(absolute ? "/" : cwd, 0);
  return [...found].sort();
}

type XmlNode = Record<string, unknown> & { ":@"?: Record<string, string> };
const tagOf = (node: XmlNode) => Object.keys(node).find((k) => k !== ":@")!;
const children = (node: XmlNode) => (node[tagOf(node)] as XmlNode[]) ?? [];
const textOf = (node: XmlNode): string =>
  children(node)
    .map((c) => (tagOf(c) === "#text" ? String(c["#text"]) : ""))
    .join("");

/** Every `<testcase>` in document order with its outcome. */
export function parseJunit(xml: string, caseName: "classname.name" | "name"): { cases: JunitCase[]; suiteName?: string } {
  const parser = new XMLParser({ preserveOrder: true, ignoreAttributes: false, attributeNamePrefix: "", parseAttributeValue: false, parseTagValue: false });
  const doc = parser.parse(xml) as XmlNode[];
  const cases: JunitCase[] = [];
  let suiteName: string | undefined;
  const visit = (nodes: XmlNode[]) => {
    for (const node of nodes) {
      const tag = tagOf(node);
      const attrs = node[":@"] ?? {};
      if (tag === "testsuite" && suiteName === undefined && attrs.name) suiteName = attrs.name;
      if (tag !== "testcase") {
        if (tag !== "#text") visit(children(node));
        continue;
      }
      const name = caseName === "name" || !attrs.classname ? (attrs.name ?? "testcase") : `${attrs.classname}.${attrs.name ?? ""}`;
      const time = Number(attrs.time);
      const duration = Number.isFinite(time) ? { duration: time } : {};
      let outcome: Outcome = { ...pass(), ...duration };
      for (const child of children(node)) {
        const t = tagOf(child);
        const a = child[":@"] ?? {};
        if (t === "failure" || t === "error") {
          const message = a.message || textOf(child).trim().split("\n")[0] || t;
          outcome = { ...fail(message), ...duration };
          break;
        }
        if (t === "skipped") outcome = { ...skip(a.message || undefined), ...duration };
      }
      cases.push({ name, outcome });
    }
  };
  visit(doc);
  return { cases, ...(suiteName ? { suiteName } : {}) };
}

const state = (ctx: Pick<EntryContext, "state">) => ctx.state as unknown as JunitState;

/** `junit`: run an external test framework and ingest its JUnit XML. */
export const junitModule: ModuleDef = {
  key: "junit",
  className: "TestJunit",
  summary: "Runs a test framework and reports each case of its JUnit XML as a row.",
  dynamicCases: true,
  params: paramSchema(() => ({
    command: optional("command", "as in `exec`; without it only `report` is read"),
    name: optional("string", "the report's device name", "the first <testsuite name>, else junit"),
    cwd: optional("string", "working directory, relative to the run's artifact directory", "the artifact directory"),
    env: optional("mapping", "extra environment variables"),
    timeout: optional("number", "seconds before the program is stopped", 3600),
    report: optional("string", "path or glob of the JUnit XML files, relative to `cwd`", "junit.xml"),
    expect_exit: optional("integers", "accepted exit statuses (frameworks exit 1 when a test fails)", [0, 1]),
    case_name: choice(["classname.name", "name"], "how a test case's report name is built", "classname.name"),
    save_output: optional("string", "artifact file name for the program's output", "<key>.log"),
  })),
  validate: (p) => (p.save_output !== undefined && !safeArtifactName(String(p.save_output)) ? "parameter 'save_output': expected a plain file name" : undefined),
  deviceName: (ctx) => str(ctx.params, "name") ?? state(ctx).suiteName ?? "junit",
  cases(ctx) {
    const s = state(ctx);
    const commandCase: CaseDef = {
      name: "command",
      run(c) {
        const p = c.params;
        if (s.process) {
          const r = s.process;
          const accepted = ints(p, "expect_exit", [0, 1]);
          if (r.startError || r.timedOut || r.aborted || r.exitCode === null || !accepted.includes(r.exitCode)) return fail(describeExit(r, s.timeoutMs));
        }
        if (s.files.length === 0) return fail(`no JUnit report found at ${str(p, "report", "junit.xml")}`);
        if (s.parseErrors.length > 0) return fail(s.parseErrors[0]);
        return pass();
      },
    };
    const seen = new Map<string, number>();
    const cases = s.cases.map((jc): CaseDef => {
      const base = sanitizeCaseName(jc.name);
      const n = (seen.get(base) ?? 0) + 1;
      seen.set(base, n);
      return { name: n === 1 ? base : `${base}_${n}`, run: () => jc.outcome };
    });
    return [commandCase, ...cases];
  },
  async setup(ctx) {
    const p = ctx.params;
    const s = state(ctx);
    s.timeoutMs = num(p, "timeout", 3600)! * 1000;
    s.files = [];
    s.parseErrors = [];
    s.cases = [];
    const cwd = resolveCwd(ctx);
    const cmd = command(p);
    if (cmd !== undefined) {
      const log = str(p, "save_output", `${ctx.moduleKey.split("/").pop()}.log`)!;
      s.process = await ctx.exec({ command: cmd, cwd, env: envOf(p), timeoutMs: s.timeoutMs, outputFile: join(ctx.artifactsDir, log) });
      ctx.recordArtifact(log);
      if (s.process.aborted) return;
    }
    s.files = await globFiles(ctx.files, cwd, str(p, "report", "junit.xml")!);
    const caseName = str(p, "case_name", "classname.name") as "classname.name" | "name";
    const artifacts = resolve(ctx.artifactsDir);
    for (const file of s.files) {
      // Read as the test's user: a report path may name anything, the server's files included.
      let xml: Buffer | undefined;
      try {
        xml = await ctx.files.read(file, XML_LIMIT + 1);
        if (xml.length > XML_LIMIT) throw new Error(`larger than ${XML_LIMIT} bytes`);
        const parsed = parseJunit(xml.toString("utf8"), caseName);
        s.cases.push(...parsed.cases);
        s.suiteName ??= parsed.suiteName;
      } catch (error) {
        s.parseErrors.push(`cannot read ${basename(file)}: ${(error as Error).message.split("\n")[0]}`);
      }
      // Keep the XML with the run: copy it in unless it was written there already.
      const rel = relative(artifacts, resolve(file));
      if (rel.startsWith("..") || isAbsolute(rel)) {
        const name = basename(file);
        if (safeArtifactName(name) && xml !== undefined && xml.length <= XML_LIMIT) {
          await ctx.files.write(join(ctx.artifactsDir, name), xml.toString("utf8")).catch(() => {});
          ctx.recordArtifact(name);
        }
      } else ctx.recordArtifact(rel.split(sep).join("/"));
    }
  },
};
