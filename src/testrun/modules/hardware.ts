import { readdir, rm, stat, writeFile } from "node:fs/promises";
import { posix } from "node:path";
import { readHead } from "../../util/files.ts";
import { describeExit, type ProcessResult } from "../../util/process.ts";
import { fail, type EntryContext, type HardwareRoots, type Outcome } from "./types.ts";

/**
 * Shared by the hardware modules (docs/modules.md). A config names kernel interfaces as on the
 * board (`/sys/class/net/eth0`, `/dev/video0`, a firmware file name); the server reads them below
 * `test_server.sys_root`, `dev_root` and `firmware_root`, so one config runs on any board and the
 * tests run against fake trees. Messages always show the config's path.
 */

const ATTRIBUTE_LIMIT = 64 * 1024;

/** Where a path as a config writes it is on this server: `/sys/...` and `/dev/...` below their roots, anything else as written (normalised, from `/`). */
export function hostPath(roots: HardwareRoots, path: string): string {
  const p = posix.normalize(`/${path}`);
  for (const [prefix, root] of [
    ["/sys", roots.sys],
    ["/dev", roots.dev],
  ] as const) {
    if (p === prefix || p.startsWith(`${prefix}/`)) return posix.join(root, p.slice(prefix.length));
  }
  return p;
}

// The board's files. Every sysfs, /dev and firmware access of a hardware module goes through these
// functions, with the path as the config writes it, so that who reads and writes them is decided here.
type Board = Pick<EntryContext, "roots">;

/** What is at a config path: `dir`, `file` (anything else: attribute, device node) or undefined when nothing. */
export const kindOf = (ctx: Board, path: string): Promise<"dir" | "file" | undefined> =>
  stat(hostPath(ctx.roots, path)).then(
    (s) => (s.isDirectory() ? "dir" : "file"),
    () => undefined,
  );

export const exists = async (ctx: Board, path: string): Promise<boolean> => (await kindOf(ctx, path)) !== undefined;

/** A sysfs attribute's content, trimmed; undefined when it cannot be read (missing, or the kernel refuses, as `speed` of a link that is down). */
export async function readAttribute(ctx: Board, path: string): Promise<string | undefined> {
  try {
    return (await readHead(hostPath(ctx.roots, path), ATTRIBUTE_LIMIT)).toString("utf8").trim();
  } catch {
    return undefined;
  }
}

/** Writes an attribute (`export`, `direction`, `firmware`); throws the system's error. */
export const writeAttribute = (ctx: Board, path: string, text: string): Promise<void> => writeFile(hostPath(ctx.roots, path), text);

/** A directory's entry names, sorted; none when it cannot be read. */
export const listDir = async (ctx: Board, path: string): Promise<string[]> => (await readdir(hostPath(ctx.roots, path)).catch(() => [] as string[])).sort();

/** Whether a file has at least one byte (a captured frame). */
export const nonEmpty = async (ctx: Board, path: string): Promise<boolean> => (await readHead(hostPath(ctx.roots, path), 1).catch(() => Buffer.alloc(0))).length > 0;

export const removeFile = (ctx: Board, path: string): Promise<void> => rm(hostPath(ctx.roots, path), { force: true });

/** Whether a firmware file (a name as the kernel's firmware loader takes it) is there. */
export const firmwareExists = (ctx: Board, name: string): Promise<boolean> => stat(posix.join(ctx.roots.firmware, posix.normalize(`/${name}`))).then(() => true, () => false);

/** A failed assertion as protoplaster's modules report it (test-run-server conventions). */
export const assertion = (text: string): Outcome => fail(`AssertionError: ${text}`);

/** The Debian package of each tool a hardware module runs, for the message when it is missing. */
export const TOOL_PACKAGES: Readonly<Record<string, string>> = {
  i2cget: "i2c-tools",
  gpioget: "gpiod",
  gpioset: "gpiod",
  "v4l2-ctl": "v4l-utils",
  memtester: "memtester",
  udevadm: "udev",
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

/** `0x1c`, `28` or `"0x1C"` as a number; NaN when it is none. */
export const integerOf = (v: unknown): number => (typeof v === "number" ? v : typeof v === "string" && /^\s*(0x[0-9a-f]+|\d+)\s*$/i.test(v) ? Number(v.trim()) : NaN);

export const hex = (n: number, digits = 2): string => `0x${n.toString(16).padStart(digits, "0")}`;
