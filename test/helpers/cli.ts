import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

// Absolute paths, so that a child started in another directory still finds tsx and the source.
const ENTRY = ["--import", import.meta.resolve("tsx"), fileURLToPath(new URL("../../src/main.ts", import.meta.url))];

/** Runs `labgate ARGS` from source to completion; `input` is its stdin (else none). */
export async function runCli(args: string[], options: { cwd?: string; env?: Record<string, string>; input?: string } = {}): Promise<CliResult> {
  const child = spawn(process.execPath, [...ENTRY, ...args], {
    cwd: process.cwd(),
    env: { ...process.env, ...options.env },
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

export interface ServeProcess {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  /** Sends the signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts a `serve`-style command (or the built executable via `command`) and waits for its listening line. */
export function startServe(args: string[], options: { env?: Record<string, string>; command?: string[]; cwd?: string } = {}): Promise<ServeProcess> {
  const [bin, ...pre] = options.command ?? [process.execPath, ...ENTRY];
  const child = spawn(bin, [...pre, ...args], {
    cwd: options.cwd ?? process.cwd(),
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    let stdout = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`server did not start: ${stderr}`));
    }, 20_000);
    child.stdout!.on("data", (d) => {
      stdout += d;
      const match = /labgate listening on (https?:\/\/\S+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve({
          child,
          url: match[1],
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
