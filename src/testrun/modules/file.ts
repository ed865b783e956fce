import { bool, choice, given, num, optional, paramSchema, regexError, required, str } from "./params.ts";
import { fail, pass, type CaseDef, type EntryContext, type ModuleDef, type Outcome } from "./types.ts";

const CONTENT_LIMIT = 64 * 1024;
const TYPES = ["file", "dir", "char", "block", "link", "socket", "fifo"] as const;

/** `mode: 0644` unquoted is an octal number under YAML 1.1, so a number is taken as the bits themselves. */
const modeBits = (v: unknown): number => (typeof v === "number" ? v : parseInt(String(v), 8));

const path = (ctx: Pick<EntryContext, "params">) => str(ctx.params, "path")!;

// Every path is touched as the test's user (ctx.files): what it may not read, the test may not either.
const readContent = async (ctx: EntryContext): Promise<string> => (await ctx.files.read(path(ctx), CONTENT_LIMIT)).toString("utf8").trim();

/** stat or lstat of the entry's path; an ENOENT error when there is nothing (as fs.stat throws). */
const statOf = async (ctx: EntryContext, follow: boolean) => {
  const info = await ctx.files.stat(path(ctx), follow);
  if (!info) throw Object.assign(new Error(`no such file or directory, stat '${path(ctx)}'`), { code: "ENOENT" });
  return info;
};

const errorText = (error: unknown) => {
  const e = error as NodeJS.ErrnoException;
  return e.code ? `${e.code}: ${e.message.replace(/^[A-Z]+: /, "")}` : String(e.message ?? e);
};

const guarded = (run: (ctx: EntryContext) => Promise<Outcome>) => async (ctx: EntryContext) => {
  try {
    return await run(ctx);
  } catch (error) {
    return fail(errorText(error));
  }
};

/** `file`: file, sysfs and /dev checks. */
export const fileModule: ModuleDef = {
  key: "file",
  className: "TestFile",
  summary: "File, sysfs and /dev checks: existence, type, mode, access, content, a numeric range, a write read back.",
  params: paramSchema(() => ({
    path: required("string", "the file, directory or device node"),
    name: optional("string", "the report's device name", "the path"),
    exists: optional("boolean", "whether the path should exist (false: only absence is checked)", true),
    type: choice(TYPES, "the kind of file"),
    mode: optional("scalar", "permission bits as an octal string such as \"0644\""),
    readable: optional("boolean", "whether the test's user (test_server.run_as, else the server's) can read it"),
    writable: optional("boolean", "whether the test's user can write it"),
    equals: optional("scalar", "the trimmed content"),
    regex: optional("string", "regular expression the content must match"),
    min: optional("number", "lowest value of the content as a number, times `scale`"),
    max: optional("number", "highest value of the content as a number, times `scale`"),
    scale: optional("number", "factor applied to the content before `min`/`max`", 1),
    write: optional("scalar", "a value written before the content checks"),
  })),
  validate(p) {
    if (p.mode !== undefined && p.mode !== null && Number.isNaN(modeBits(p.mode))) return "parameter 'mode': expected an octal string such as \"0644\"";
    return regexError(p, "regex");
  },
  deviceName: ({ params }) => str(params, "name") ?? str(params, "path")!,
  cases({ params: p }) {
    const cases: CaseDef[] = [
      {
        name: "exists",
        async run(ctx) {
          const want = bool(ctx.params, "exists", true);
          const found = await ctx.files.stat(path(ctx), false).then((info) => info !== undefined, (error: unknown) => error);
          if (typeof found !== "boolean") return fail(errorText(found));
          if (found === want) return pass();
          return fail(want ? `${path(ctx)} does not exist` : `${path(ctx)} exists`);
        },
      },
    ];
    if (bool(p, "exists", true) === false) return cases;
    if (given(p, "type"))
      cases.push({
        name: "type",
        run: guarded(async (ctx) => {
          const want = str(ctx.params, "type")!;
          const actual = (await statOf(ctx, want !== "link")).type;
          return actual === want ? pass() : fail(`expected type ${want}, got ${actual}`);
        }),
      });
    if (given(p, "mode"))
      cases.push({
        name: "mode",
        run: guarded(async (ctx) => {
          const want = modeBits(ctx.params.mode) & 0o7777;
          const actual = (await statOf(ctx, true)).mode;
          return actual === want ? pass() : fail(`expected mode ${want.toString(8).padStart(4, "0")}, got ${actual.toString(8).padStart(4, "0")}`);
        }),
      });
    if (given(p, "readable", "writable"))
      cases.push({
        name: "access",
        run: guarded(async (ctx) => {
          for (const [key, how, word] of [
            ["readable", "r", "readable"],
            ["writable", "w", "writable"],
          ] as const) {
            const want = bool(ctx.params, key);
            if (want === undefined) continue;
            const ok = await ctx.files.access(path(ctx), how);
            if (ok !== want) return fail(`${path(ctx)} is ${ok ? "" : "not "}${word}`);
          }
          return pass();
        }),
      });
    if (given(p, "write"))
      cases.push({
        name: "write",
        run: guarded(async (ctx) => {
          await ctx.files.write(path(ctx), String(ctx.params.write));
          return pass();
        }),
      });
    if (given(p, "equals", "regex"))
      cases.push({
        name: "content",
        run: guarded(async (ctx) => {
          const content = await readContent(ctx);
          const equals = ctx.params.equals;
          if (equals !== undefined && equals !== null && content !== String(equals)) return fail(`expected ${JSON.stringify(String(equals))}, got ${JSON.stringify(content)}`);
          const regex = str(ctx.params, "regex");
          if (regex !== undefined && !new RegExp(regex, "m").test(content)) return fail(`content does not match /${regex}/`);
          return pass();
        }),
      });
    if (given(p, "min", "max"))
      cases.push({
        name: "range",
        run: guarded(async (ctx) => {
          const content = await readContent(ctx);
          const raw = Number(content);
          if (content === "" || Number.isNaN(raw)) return fail(`content ${JSON.stringify(content)} is not a number`);
          const value = raw * num(ctx.params, "scale", 1)!;
          const min = num(ctx.params, "min");
          const max = num(ctx.params, "max");
          if (min !== undefined && value < min) return fail(`value ${value} is below the minimum ${min}`);
          if (max !== undefined && value > max) return fail(`value ${value} is above the maximum ${max}`);
          return pass();
        }),
      });
    return cases;
  },
};
