const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const pad = (n: number) => String(n).padStart(2, "0");

/**
 * RFC 822 date in UTC, whole seconds: `Sat, 21 Nov 2026 07:12:31 GMT`.
 * The update server writes the `GMT` zone (update-server.md 1.3); the test-run server writes
 * `+0000` (test-run-server.md 1.3). Both are the same instant in valid RFC 822.
 */
export function rfc822(date: Date, zone: "GMT" | "+0000" = "GMT"): string {
  return (
    `${DAYS[date.getUTCDay()]}, ${pad(date.getUTCDate())} ${MONTHS[date.getUTCMonth()]} ${date.getUTCFullYear()} ` +
    `${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())} ${zone}`
  );
}

/** UNIX seconds. */
export const epochSeconds = (date: Date = new Date()): number => Math.floor(date.getTime() / 1000);

/** Parses `30d`, `12h`, `15m`, `45s` or bare seconds into seconds. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+)\s*([smhdw]?)$/.exec(text.trim());
  if (!match) return undefined;
  const unit = { "": 1, s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[match[2] as "" | "s" | "m" | "h" | "d" | "w"];
  const seconds = Number(match[1]) * unit;
  return seconds > 0 ? seconds : undefined;
}
