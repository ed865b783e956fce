/** What `log_level` and `log_format` may say (src/config/config.ts reads them). */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
export const LOG_FORMATS = ["text", "json"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFormat = (typeof LOG_FORMATS)[number];
import { isoTime } from "./time.ts";

const ORDER: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

/** What a line says about the request it belongs to. */
export interface RequestFields {
  request_id: string;
  method?: string;
  path?: string;
  status?: number;
  ms?: number;
}

export interface Logger {
  error(message: string, request?: RequestFields): void;
  warn(message: string, request?: RequestFields): void;
  info(message: string, request?: RequestFields): void;
  debug(message: string, request?: RequestFields): void;
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

/** `text`: `TIME LEVEL [request id] message`; `json`: one object per line for log collectors. */
function formatLine(format: LogFormat, level: LogLevel, message: string, request: RequestFields | undefined): string {
  const time = isoTime();
  if (format === "json") return JSON.stringify({ time, level, message, ...request });
  return `${time} ${level.toUpperCase().padEnd(5)} ${request ? `[${request.request_id}] ` : ""}${message}`;
}

export interface LoggerOptions {
  format?: LogFormat;
  /** Where lines go instead of stderr (tests). */
  write?: (line: string) => void;
}

/** Logs go to stderr, one line each, so that stdout carries only what commands print. */
export function createLogger(level: LogLevel, options: LoggerOptions = {}): Logger {
  const { write, format = "text" } = options;
  const out = write ? (line: string) => write(line) : stderrWriter();
  const at = (l: LogLevel) => (message: string, request?: RequestFields) => {
    if (ORDER[l] <= ORDER[level]) out(formatLine(format, l, message, request), ORDER[l] <= ORDER.warn);
  };
  return { error: at("error"), warn: at("warn"), info: at("info"), debug: at("debug"), enabled: (l) => ORDER[l] <= ORDER[level] };
}
