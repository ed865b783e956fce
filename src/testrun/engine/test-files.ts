/**
 * The files a test names (the `file` module's path, a JUnit report, the board's sysfs and /dev
 * below `sys_root`/`dev_root`), touched with the test's identity: what its user may not read, the
 * test may not read through the server either. Paths that must stay inside a tree (`below`) are
 * opened first and then checked, so a link swapped between a check and the access cannot lead out.
 */
import { constants, type Stats } from "node:fs";
import { access, lstat, open, readdir, readlink, realpath, stat, type FileHandle } from "node:fs/promises";
import { readHead } from "../../util/files.ts";
import type { ProcessResult } from "../../util/process.ts";
import { runTestProcess, type TestIdentity } from "./identity.ts";

/** What a test may know of a path: its kind (`file`, `dir`, `link`...) and permission bits. */
export interface PathInfo {
  type: string;
  mode: number;
}

/** The operations on a test's files. */
export interface FileOps {
  /** lstat (`follow` false) or stat; undefined when nothing is there. */
  stat(path: string, follow: boolean): Promise<PathInfo | undefined>;
  /** Whether the test's user may read (`r`) or write (`w`) it. */
  access(path: string, how: "r" | "w"): Promise<boolean>;
  /** The first `limit` bytes. */
  read(path: string, limit: number): Promise<Buffer>;
  /** Writes `text` (created or truncated; below a root: an existing file only, never through a link). */
  write(path: string, text: string): Promise<void>;
  /** A directory's entries (`dir`: a directory, links not followed). */
  list(path: string): Promise<Array<{ name: string; dir: boolean }>>;
}

export interface TestFiles extends FileOps {
  /**
   * The same operations on paths that must lie below `root` (links resolved) at the moment they
   * are done: what the path leads to is opened first, then checked, then used (OutsideRoot otherwise).
   */
  below(root: string): FileOps;
}

/** A path that led out of its tree when it was opened. */
export class OutsideRoot extends Error {}

const typeOf = (mode: number): string => {
  switch (mode & constants.S_IFMT) {
    case constants.S_IFLNK:
      return "link";
    case constants.S_IFREG:
      return "file";
    case constants.S_IFDIR:
      return "dir";
    case constants.S_IFCHR:
      return "char";
    case constants.S_IFBLK:
      return "block";
    case constants.S_IFSOCK:
      return "socket";
    case constants.S_IFIFO:
      return "fifo";
    default:
      return "unknown";
  }
};

const infoOf = (s: Stats): PathInfo => ({ type: typeOf(s.mode), mode: s.mode & 0o7777 });
const absent = (error: NodeJS.ErrnoException) => error.code === "ENOENT" || error.code === "ENOTDIR";
const inside = (path: string, root: string) => root === "/" || path === root || path.startsWith(`${root}/`);

/** Linux's O_PATH: a location, not an open file (no read, no device's open side effects). Node does not export it. */
const O_PATH = 0o10000000;

/**
 * Opens what `path` leads to (links followed; the last one not when `follow` is false) as a
 * location and checks that the object opened is below `root`: the check is of the very object
 * later used through `/proc/self/fd/N`, whatever is swapped meanwhile.
 */
async function pin(root: string, path: string, follow: boolean): Promise<FileHandle> {
  const handle = await open(path, O_PATH | (follow ? 0 : constants.O_NOFOLLOW));
  try {
    const [real, realRoot] = await Promise.all([readlink(`/proc/self/fd/${handle.fd}`), realpath(root).catch(() => root)]);
    if (!inside(real, realRoot)) throw new OutsideRoot(`${path} leads outside ${root}`);
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

async function pinned<T>(root: string, path: string, follow: boolean, use: (handle: FileHandle) => Promise<T>): Promise<T> {
  const handle = await pin(root, path, follow);
  try {
    return await use(handle);
  } finally {
    await handle.close();
  }
}

/** stat and access answer false/undefined for nothing there; OutsideRoot and other errors stay errors. */
const orAbsent = <T>(fallback: T) => (error: NodeJS.ErrnoException): T => {
  if (absent(error)) return fallback;
  throw error;
};

const writeHandle = async (path: string, flags: number, text: string): Promise<void> => {
  const handle = await open(path, flags, 0o666);
  try {
    await handle.writeFile(text);
  } finally {
    await handle.close();
  }
};

const listOf = async (path: string) => (await readdir(path, { withFileTypes: true })).map((entry) => ({ name: entry.name, dir: entry.isDirectory() }));

/** TestFiles with the server's own identity (no run_as). */
const serverFiles: TestFiles = {
  stat: (path, follow) => (follow ? stat(path) : lstat(path)).then(infoOf, orAbsent(undefined)),
  access: (path, how) => access(path, how === "r" ? constants.R_OK : constants.W_OK).then(() => true, () => false),
  read: (path, limit) => readHead(path, limit),
  list: listOf,
  write: (path, text) => writeHandle(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, text),
  below: (root) => ({
    stat: (path, follow) => pinned(root, path, follow, async (h) => infoOf(await h.stat())).catch(orAbsent(undefined)),
    access: (path, how) => pinned(root, path, true, (h) => access(`/proc/self/fd/${h.fd}`, how === "r" ? constants.R_OK : constants.W_OK).then(() => true, () => false)).catch(orAbsent(false)),
    read: (path, limit) => pinned(root, path, true, (h) => readHead(`/proc/self/fd/${h.fd}`, limit)),
    // The last component is not followed: a link there is opened as the link, and reopening a link fails (ELOOP).
    write: (path, text) => pinned(root, path, false, (h) => writeHandle(`/proc/self/fd/${h.fd}`, constants.O_WRONLY | constants.O_TRUNC, text)),
    list: (path) => pinned(root, path, true, (h) => listOf(`/proc/self/fd/${h.fd}`)),
  }),
};

/**
 * Below a root, as the test's user: the server pins the object (pin), the user's program gets it
 * as its fd 3 and first shows that it reaches the same object by the path itself (so nothing the
 * user could not reach becomes reachable), then works on `/proc/self/fd/3`: the pinned object
 * (`stat -L` there is the object itself, a link too, never what a link points to).
 */
const SAME_OBJECT = `[ "$(stat $F -c %d:%i -- "$P" 2>/dev/null)" = "$(stat -L -c %d:%i /proc/self/fd/3)" ] || { echo "$P: No such file or directory" >&2; exit 1; }`;
const AS_USER_BELOW = (follow: boolean, body: string) => `P="$1"; F=${follow ? "-L" : ""}; shift; ${SAME_OBJECT}; ${body}`;

/** TestFiles as `identity`: each operation is a small program (coreutils) run as that user. */
function identityFiles(identity: TestIdentity, runDir: string): TestFiles {
  const run = (command: string[], limit = 64 * 1024, fd3?: number) => runTestProcess(identity, runDir, { command, cwd: runDir, timeoutMs: 30_000, outputLimit: limit, ...(fd3 === undefined ? {} : { fd3 }) });
  const failure = (r: ProcessResult) => new Error(r.startError ?? (r.stderr.trim().split("\n")[0] || `exit status ${r.exitCode}`));
  /** Runs `body` (sh, `$@` its arguments) as the user on what `path` leads to, pinned below `root`. */
  const onPinned = (root: string, path: string, follow: boolean, body: string, args: string[], limit?: number) =>
    pinned(root, path, follow, (h) => run(["/bin/sh", "-c", AS_USER_BELOW(follow, body), "sh", path, ...args], limit, h.fd));
  const parseList = (r: ProcessResult) => {
    if (r.exitCode !== 0) throw failure(r);
    // NUL-separated: a name may hold any byte but "/" and NUL.
    return r.stdout.split("\0").filter(Boolean).map((line) => ({ name: line.slice(2), dir: line[0] === "d" }));
  };
  const LIST = ["-mindepth", "1", "-maxdepth", "1", "-printf", "%y %f\\0"];
  const toBuffer = (r: ProcessResult) => {
    if (r.exitCode !== 0) throw failure(r);
    return Buffer.from(r.stdout, "utf8");
  };
  const written = (r: ProcessResult) => {
    if (r.exitCode !== 0) throw failure(r);
  };
  return {
    async stat(path, follow) {
      const r = await run(["stat", ...(follow ? ["-L"] : []), "-c", "%f", "--", path]);
      if (r.exitCode === 0) return { type: typeOf(parseInt(r.stdout.trim(), 16)), mode: parseInt(r.stdout.trim(), 16) & 0o7777 };
      if (/No such file|Not a directory/.test(r.stderr)) return undefined;
      throw failure(r);
    },
    access: async (path, how) => (await run(["test", `-${how}`, path])).exitCode === 0,
    read: async (path, limit) => toBuffer(await run(["head", "-c", String(limit), "--", path], limit)),
    write: async (path, text) => written(await run(["sh", "-c", 'printf "%s" "$1" > "$2"', "sh", text, path])),
    list: async (path) => parseList(await run(["find", path, ...LIST], 4 * 1024 * 1024)),
    below: (root) => ({
      async stat(path, follow) {
        const r = await onPinned(root, path, follow, "stat -L -c %f /proc/self/fd/3", []).catch(orAbsent(undefined));
        if (r === undefined) return undefined;
        if (r.exitCode === 0) return { type: typeOf(parseInt(r.stdout.trim(), 16)), mode: parseInt(r.stdout.trim(), 16) & 0o7777 };
        if (/No such file|Not a directory/.test(r.stderr)) return undefined;
        throw failure(r);
      },
      access: (path, how) => onPinned(root, path, true, `test -${how} /proc/self/fd/3`, []).then((r) => r.exitCode === 0, orAbsent(false)),
      read: async (path, limit) => toBuffer(await onPinned(root, path, true, 'head -c "$1" /proc/self/fd/3', [String(limit)], limit)),
      write: async (path, text) => written(await onPinned(root, path, false, 'printf "%s" "$1" > /proc/self/fd/3', [text])),
      list: async (path) => parseList(await onPinned(root, path, true, `find /proc/self/fd/3/ ${LIST.slice(0, 5).join(" ")} '%y %f\\0'`, [], 4 * 1024 * 1024)),
    }),
  };
}

/** The TestFiles of a run: as `identity`, else as the server. */
export const testFiles = (identity: TestIdentity | undefined, runDir: string): TestFiles => (identity ? identityFiles(identity, runDir) : serverFiles);
