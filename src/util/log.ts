import type { LogLevel } from "../config/config.ts";

const ORDER: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

export interface Logger {
  error(message: string): void;
  warn(message: string): void;
  info(message: string): void;
  debug(message: string): void;
  enabled(level: LogLevel): boolean;
}

/** Logs go to stderr, one line each, so that stdout carries only what commands print. */
export function createLogger(level: LogLevel, write: (line: string) => void = (line) => process.stderr.write(line + "\n")): Logger {
  const at = (l: LogLevel) => (message: string) => {
    if (ORDER[l] <= ORDER[level]) write(`${new Date().toISOString()} ${l.toUpperCase().padEnd(5)} ${message}`);
  };
  return { error: at("error"), warn: at("warn"), info: at("info"), debug: at("debug"), enabled: (l) => ORDER[l] <= ORDER[level] };
}
