import type { LogLevel } from "../config/config.ts";

const ORDER: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

export interface Logger {
  error(message: string): void;
  warn(message: string): void;
  info(message: string): void;
  debug(message: string): void;
  enabled(level: LogLevel): boolean;
}

/** Buffers of stderr loggers with lines not written yet, flushed at exit whatever happens. */
const unflushed = new Set<() => void>();
let exitHooked = false;

/**
 * stderr, with info and debug lines of one event loop turn written together (a request log line
 * per request was one write syscall each); warn and error lines are written at once, after any
 * buffered lines so that the order stays as logged.
 */
function stderrWriter(): (line: string, urgent: boolean) => void {
  let lines: string[] = [];
  const flush = () => {
    unflushed.delete(flush);
    if (lines.length === 0) return;
    const text = lines.join("\n") + "\n";
    lines = [];
    process.stderr.write(text);
  };
  return (line, urgent) => {
    lines.push(line);
    if (urgent) return flush();
    if (unflushed.has(flush)) return;
    unflushed.add(flush);
    setImmediate(flush);
    if (!exitHooked) {
      exitHooked = true;
      process.on("exit", () => {
        for (const pending of unflushed) pending();
      });
    }
  };
}

/** Logs go to stderr, one line each, so that stdout carries only what commands print. */
export function createLogger(level: LogLevel, write?: (line: string) => void): Logger {
  const out = write ? (line: string) => write(line) : stderrWriter();
  const at = (l: LogLevel) => (message: string) => {
    if (ORDER[l] <= ORDER[level]) out(`${new Date().toISOString()} ${l.toUpperCase().padEnd(5)} ${message}`, ORDER[l] <= ORDER.warn);
  };
  return { error: at("error"), warn: at("warn"), info: at("info"), debug: at("debug"), enabled: (l) => ORDER[l] <= ORDER[level] };
}
