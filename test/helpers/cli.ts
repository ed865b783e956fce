import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { closeSync, openSync, readSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BUNDLE_ENV, buildTestBundle } from "./bundle.ts";
import { cliDatabaseEnv } from "./test-database.ts";

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * `npm start`'s way: node with tsx on src/main.ts (absolute paths, so that a child started in
 * another directory still finds tsx and the source). About 0.9 s a start; most tests use `labgate()`.
 */
export const FROM_SOURCE = [process.execPath, "--import", import.meta.resolve("tsx"), fileURLToPath(new URL("../../src/main.ts", import.meta.url))];

let command: Promise<string[]> | undefined;

/**
 * How tests start labgate: node on the bundle of src/main.ts that scripts/run-tests.mjs built once
 * for the run (its path in LABGATE_TEST_BUNDLE), or, for a test file run on its own, one this
 * process builds on first use. Starts in about a quarter of FROM_SOURCE's time.
 */
export function labgate(): Promise<string[]> {
  const built = process.env[BUNDLE_ENV];
  command ??= (built ? Promise.resolve(built) : buildTestBundle()).then((bundle) => [process.execPath, bundle]);
  return command;
}

/**
 * The command that runs a built executable here: the file itself, or, for an arm64 one (ELF
 * e_machine 0xb7) on another machine, qemu-aarch64-static with Debian's arm64 libraries as its
 * root (.ci/run installs both), as scripts/smoke-executable.sh does.
 */
export function executableCommand(path: string): string[] {
  const header = Buffer.alloc(20);
  const fd = openSync(path, "r");
  try {
    readSync(fd, header, 0, 20, 0);
  } finally {
    closeSync(fd);
  }
  const aarch64 = header.subarray(0, 4).equals(Buffer.from("\x7fELF", "latin1")) && header.readUInt16LE(18) === 0xb7;
  return aarch64 && process.arch !== "arm64" ? ["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", path] : [path];
}

/** `node` on a test fixture bundled beside labgate()'s bundle (see buildTestBundle). */
export async function bundledFixture(name: "crash-writer"): Promise<string[]> {
  const [node, bundle] = await labgate();
  return [node, join(dirname(bundle), `${name}.mjs`)];
}

/** Runs `labgate ARGS` to completion; `input` is its stdin (else none); `command` as for startServe. */
export async function runCli(args: string[], options: { cwd?: string; env?: Record<string, string>; input?: string; command?: string[] } = {}): Promise<CliResult> {
  const [bin, ...pre] = options.command ?? (await labgate());
  const child = spawn(bin, [...pre, ...args], {
    cwd: process.cwd(),
    env: { ...process.env, ...(await cliDatabaseEnv(args, options.env)) },
    stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
  });
  child.stdin?.end(options.input);
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d) => (stdout += d));
  child.stderr!.on("data", (d) => (stderr += d));
  const [code] = await once(child, "exit");
  return { code, stdout, stderr };
}

/**
 * Runs `labgate ARGS` in this process (main() of src/cli/main.ts, whose answer src/main.ts makes
 * the exit code), with `env` added to process.env meanwhile: for commands that end on their own
 * at once without input (usage and config errors), where the process boundary is not what is
 * tested. Captures stderr only (this process's stdout carries the test runner's report).
 */
export async function runInProcess(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stderr: string }> {
  const { main } = await import("../../src/cli/main.ts");
  const saved = Object.fromEntries(Object.keys(env).map((key) => [key, process.env[key]]));
  const write = process.stderr.write;
  let stderr = "";
  Object.assign(process.env, env);
  process.stderr.write = ((chunk: string | Uint8Array) => ((stderr += String(chunk)), true)) as typeof process.stderr.write;
  try {
    return { code: await main(args), stderr };
  } finally {
    process.stderr.write = write;
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
}

export interface ServeProcess {
  child: ChildProcess;
  url: string;
  stdout: () => string;
  stderr: () => string;
  /** Sends the signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Starts a `serve`-style command of labgate() (or of `command`: FROM_SOURCE, the built executable)
 * and waits for its listening line (at most `startTimeoutMs`, default 60 s: a bound on a hung start,
 * not a timing target; a start that migrates a new PostgreSQL database on a loaded machine took over 20 s).
 */
export async function startServe(args: string[], options: { env?: Record<string, string>; command?: string[]; cwd?: string; startTimeoutMs?: number } = {}): Promise<ServeProcess> {
  const [bin, ...pre] = options.command ?? (await labgate());
  const child = spawn(bin, [...pre, ...args], {
    cwd: options.cwd ?? process.cwd(),
    env: { ...process.env, ...(await cliDatabaseEnv(args, options.env)) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    let stdout = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`server did not start: ${stderr}`));
    }, options.startTimeoutMs ?? 60_000);
    child.stdout!.on("data", (d) => {
      stdout += d;
      const match = /labgate listening on (https?:\/\/\S+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve({
          child,
          url: match[1],
          stdout: () => stdout,
          stderr: () => stderr,
          async stop(signal = "SIGTERM") {
            if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
            child.kill(signal);
            const [code] = await once(child, "exit");
            return code;
          },
        });
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening: ${stderr}`));
    });
  });
}
