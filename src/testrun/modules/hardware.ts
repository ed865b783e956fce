import { realpath } from "node:fs/promises";
import { posix } from "node:path";
import { describeExit, type ProcessResult } from "../../util/process.ts";
import { OutsideRoot, type FileOps } from "../engine/test-files.ts";
import { fail, type EntryContext, type HardwareRoots, type Outcome } from "./types.ts";

/**
 * Shared by the hardware modules (docs/modules.md). A config names kernel interfaces as on the
 * board (`/sys/class/net/eth0`, `/dev/video0`, a firmware file name); the server reads them below
 * `test_server.sys_root`, `dev_root` and `firmware_root`, so one config runs on any board and the
 * tests run against fake trees. Messages always show the config's path.
 */

const ATTRIBUTE_LIMIT = 64 * 1024;

/** A config path that would leave the board's trees: the case fails with this message. */
export class BoardPathError extends Error {}

const AREAS = [
  ["/sys", "sys"],
  ["/dev", "dev"],
] as const;
export type Area = (typeof AREAS)[number][0];

const hasDotDot = (path: string) => path.split("/").includes("..");
const inside = (path: string, root: string) => root === "/" || path === root || path.startsWith(`${root}/`);

/** At trigger: why a path parameter is refused (`..`, or not under one of `areas`), or undefined. */
export function boardPathError(value: unknown, key: string, areas: readonly Area[]): string | undefined {
  const path = String(value);
  if (hasDotDot(path)) return `parameter '${key}': '..' is not allowed`;
  const p = posix.normalize(path);
  return areas.some((a) => inside(p, a)) ? undefined : `parameter '${key}': expected a path under ${areas.join(" or ")}`;
}

/**
 * Refuses `host` when the longest part of it that exists, links resolved, is not below `root`:
 * sysfs's and /dev's own links stay inside their tree, a link out of it (`/dev/fd`, a planted
 * link to the data dir) is refused.
 */
async function confine(root: string, host: string, message: string): Promise<void> {
  const realRoot = await realpath(root).catch(() => root);
  for (let probe = host; ; probe = posix.dirname(probe)) {
    const real = await realpath(probe).catch(() => undefined);
    if (real !== undefined) {
      if (!inside(real, realRoot)) throw new BoardPathError(message);
      return;
    }
    if (posix.dirname(probe) === probe) return;
  }
}

/** A config path on this server: the host path, the tree it must stay in, and how to say it left it. */
interface Located {
  host: string;
  root: string;
  outside: string;
}

async function locate(roots: HardwareRoots, path: string): Promise<Located> {
  if (hasDotDot(path)) throw new BoardPathError(`${path}: '..' is not allowed`);
  const p = posix.normalize(`/${path}`);
  for (const [prefix, key] of AREAS) {
    if (!inside(p, prefix)) continue;
    const located = { host: posix.join(roots[key], p.slice(prefix.length)), root: roots[key], outside: `${p} leads outside ${prefix}` };
    await confine(located.root, located.host, located.outside);
    return located;
  }
  throw new BoardPathError(`${path} is not under /sys or /dev`);
}

/** Where a config's `/sys/...` or `/dev/...` path is on this server, below `sys_root` or `dev_root` (for a tool to open); a BoardPathError for any other path. */
export const boardPath = async (roots: HardwareRoots, path: string): Promise<string> => (await locate(roots, path)).host;

// The board's files. Every sysfs, /dev and firmware access of a hardware module goes through these
// functions, with the path as the config writes it, confined to the board's trees, and done as
// the test's user (ctx.files: `test_server.run_as`), never with the server's identity. `confine`
// above gives a clear message for a link out of the tree; the access itself (files.below) checks
// again what it opened, so a link swapped after that check leads nowhere either.
type Board = Pick<EntryContext, "roots" | "files">;

/** Runs `access` on the located path; a path that led outside when opened is a BoardPathError, anything else `fallback`. */
async function onBoard<T, F>(ctx: Board, at: Located, access: (files: FileOps, host: string) => Promise<T>, fallback: F): Promise<T | F> {
  try {
    return await access(ctx.files.below(at.root), at.host);
  } catch (error) {
    if (error instanceof OutsideRoot) throw new BoardPathError(at.outside);
    return fallback;
  }
}

/** The kind of what is at a config path, links followed (`file`, `dir`, `char`, `block`...), or undefined when nothing. */
export const fileType = async (ctx: Board, path: string): Promise<string | undefined> => (await onBoard(ctx, await locate(ctx.roots, path), (f, host) => f.stat(host, true), undefined))?.type;

/** What is at a config path: `dir`, `file` (anything else: attribute, device node) or undefined when nothing. */
export async function kindOf(ctx: Board, path: string): Promise<"dir" | "file" | undefined> {
  const type = await fileType(ctx, path);
  return type === undefined ? undefined : type === "dir" ? "dir" : "file";
}

export const exists = async (ctx: Board, path: string): Promise<boolean> => (await kindOf(ctx, path)) !== undefined;

/** A sysfs attribute's content, trimmed; undefined when it cannot be read (missing, or the kernel refuses, as `speed` of a link that is down). */
export const readAttribute = async (ctx: Board, path: string): Promise<string | undefined> =>
  (await onBoard(ctx, await locate(ctx.roots, path), (f, host) => f.read(host, ATTRIBUTE_LIMIT), undefined))?.toString("utf8").trim();

/** Writes an existing attribute (`export`, `direction`, `firmware`), never creating a file; throws the system's error. */
export async function writeAttribute(ctx: Board, path: string, text: string): Promise<void> {
  const at = await locate(ctx.roots, path);
  if ((await fileType(ctx, path)) === undefined) throw new Error(`${path} does not exist`);
  await ctx.files
    .below(at.root)
    .write(at.host, text)
    .catch((error: unknown) => {
      throw error instanceof OutsideRoot ? new BoardPathError(at.outside) : error;
    });
}

/** A directory's entry names, sorted; none when it cannot be read. */
export const listDir = async (ctx: Board, path: string): Promise<string[]> => (await onBoard(ctx, await locate(ctx.roots, path), (f, host) => f.list(host), [])).map((e) => e.name).sort();

/** Whether a firmware file (a name as the kernel's firmware loader takes it, below `firmware_root`) is there. */
export async function firmwareExists(ctx: Board, name: string): Promise<boolean> {
  if (hasDotDot(name)) throw new BoardPathError(`${name}: '..' is not allowed`);
  const at = { host: posix.join(ctx.roots.firmware, posix.normalize(`/${name}`)), root: ctx.roots.firmware, outside: `${name} leads outside the firmware directory` };
  await confine(at.root, at.host, at.outside);
  return (await onBoard(ctx, at, (f, host) => f.stat(host, true), undefined)) !== undefined;
}

/** Whether a file the run wrote into its directory has at least one byte (a captured frame). */
export const runFileNonEmpty = async (ctx: Pick<EntryContext, "artifactsDir" | "files">, name: string): Promise<boolean> =>
  ((await ctx.files.read(posix.join(ctx.artifactsDir, name), 1).catch(() => undefined))?.length ?? 0) > 0;

/** Removes a file the run wrote into its directory, as the test's user (who owns it). */
export const removeRunFile = async (ctx: Pick<EntryContext, "artifactsDir" | "exec">, name: string): Promise<void> => {
  await ctx.exec({ command: ["rm", "-f", "--", posix.join(ctx.artifactsDir, name)], timeoutMs: 30_000 });
};

/** A failed assertion as protoplaster's modules report it. */
export const assertion = (text: string): Outcome => fail(`AssertionError: ${text}`);

/** The Debian package of each tool a hardware module runs, for the message when it is missing. */
export const TOOL_PACKAGES: Readonly<Record<string, string>> = {
  i2cget: "i2c-tools",
  gpioget: "gpiod",
  gpioset: "gpiod",
  "v4l2-ctl": "v4l-utils",
  memtester: "memtester",
  udevadm: "udev",
  "spi-pipe": "spi-tools",
};

/**
 * Runs a distribution tool for a kernel interface Node cannot reach (ioctls), through the entry's
 * `exec` like every program a module starts. A missing tool ends with a `startError` naming the
 * package to install, never a crash.
 */
export async function runTool(ctx: Pick<EntryContext, "exec">, argv: string[], timeoutSeconds = 30): Promise<ProcessResult> {
  const r = await ctx.exec({ command: argv, timeoutMs: timeoutSeconds * 1000 });
  const tool = argv[0]!;
  if (r.startError?.endsWith("not found") && TOOL_PACKAGES[tool]) return { ...r, startError: `${tool} not found: install the Debian package ${TOOL_PACKAGES[tool]}` };
  return r;
}

/** Why a tool did not answer (could not start, timed out, aborted), or undefined when it ran to an exit status. */
export const toolProblem = (r: ProcessResult, timeoutSeconds = 30): string | undefined => (r.exitCode === null || r.timedOut ? describeExit(r, timeoutSeconds * 1000) : undefined);

/** The first line of a tool's complaint. */
export const firstLine = (text: string): string => text.trim().split("\n")[0] ?? "";

/** Why a tool failed: `toolProblem`, or a status other than 0 with the first line it wrote to stderr. */
export const toolFailure = (r: ProcessResult, tool: string, timeoutSeconds = 30): string | undefined =>
  toolProblem(r, timeoutSeconds) ?? (r.exitCode !== 0 ? `${tool} exited with status ${r.exitCode}: ${firstLine(r.stderr)}` : undefined);

/** `0x1c`, `28` or `"0x1C"` as a number; NaN when it is none. */
export const integerOf = (v: unknown): number => (typeof v === "number" ? v : typeof v === "string" && /^\s*(0x[0-9a-f]+|\d+)\s*$/i.test(v) ? Number(v.trim()) : NaN);

export const hex = (n: number, digits = 2): string => `0x${n.toString(16).padStart(digits, "0")}`;
