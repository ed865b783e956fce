const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const pad = (n: number) => String(n).padStart(2, "0");

/**
 * RFC 822 date in UTC, whole seconds: `Sat, 21 Nov 2026 07:12:31 GMT`.
 * The update server writes the `GMT` zone; the test-run server writes
 * `+0000`. Both are the same instant in valid RFC 822.
 */
export function rfc822(date: Date, zone: "GMT" | "+0000" = "GMT"): string {
  return (
    `${DAYS[date.getUTCDay()]}, ${pad(date.getUTCDate())} ${MONTHS[date.getUTCMonth()]} ${date.getUTCFullYear()} ` +
    `${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())} ${zone}`
  );
}

/**
 * `new Date(time).toISOString()`, the one ISO 8601 formatter of the program, from the UTC fields:
 * V8's toISOString looks up the host's time zone first (loading ICU's zone data and code into an
 * idle agent's memory), which a UTC time never needs. Years outside 0-9999 and
 * invalid times (a RangeError) are toISOString's.
 */
export function isoTime(time: Date | number = Date.now()): string {
  const date = new Date(time);
  const year = date.getUTCFullYear();
  if (!(year >= 0 && year <= 9999)) return date.toISOString();
  const day = `${String(year).padStart(4, "0")}-${pad(date.getUTCMonth() + 1)}-${pad(date.getUTCDate())}`;
  return `${day}T${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())}.${String(date.getUTCMilliseconds()).padStart(3, "0")}Z`;
}

const ZONES: Record<string, number> = { UT: 0, UTC: 0, GMT: 0, Z: 0, EST: -5, EDT: -4, CST: -6, CDT: -5, MST: -7, MDT: -6, PST: -8, PDT: -7 };
const RFC822 = /^\s*(?:(Sun|Mon|Tue|Wed|Thu|Fri|Sat),\s*)?(\d{1,2})\s+(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+(\d{4}|\d{2})\s+(\d{2}):(\d{2})(?::(\d{2}))?(?:\s+([+-]\d{4}|[A-Z]{1,3}))?\s*$/i;

/**
 * Parses an RFC 822 / RFC 2822 date as Python's email.utils.parsedate_to_datetime accepts it
 * (`Wed, 02 Oct 2002 15:00:00 -0000`, `2 Oct 2002 15:00 GMT`; no zone means UTC). Anything else,
 * ISO 8601 included, is undefined.
 */
export function parseRfc822(text: string): Date | undefined {
  const m = RFC822.exec(text);
  if (!m) return undefined;
  const [, , day, month, yearText, hh, mm, ss, zone] = m;
  let year = Number(yearText);
  if (yearText.length === 2) year += year < 50 ? 2000 : 1900;
  const monthIndex = MONTHS.findIndex((name) => name.toLowerCase() === month.toLowerCase());
  let offsetMinutes = 0;
  if (zone && /^[+-]/.test(zone)) offsetMinutes = (zone[0] === "-" ? -1 : 1) * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(3, 5)));
  else if (zone) {
    const hours = ZONES[zone.toUpperCase()];
    if (hours === undefined) return undefined;
    offsetMinutes = hours * 60;
  }
  const [d, h, min, s] = [Number(day), Number(hh), Number(mm), Number(ss ?? 0)];
  if (d < 1 || d > 31 || h > 23 || min > 59 || s > 60) return undefined;
  const utc = Date.UTC(year, monthIndex, d, h, min, Math.min(s, 59)) - offsetMinutes * 60_000;
  // 31 Feb and the like roll over in Date.UTC: refuse them.
  if (new Date(Date.UTC(year, monthIndex, d)).getUTCDate() !== d) return undefined;
  return new Date(utc);
}

/**
 * Where the domain reads the time and waits: the server's AppContext carries one (`ctx.clock`),
 * and so does the device agent (its backoff and update checks), so that tests can move time
 * (token, link and registration expiry, retry delays) instead of waiting for it.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Waits `ms` of this clock's time; an abort of `signal` ends the wait early (it resolves, never rejects). */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = { now: () => Date.now(), sleep };

/**
 * Runs `fn` once `ms` of `clock`'s time have passed, unless the returned function cancels it
 * first. Every deadline (a device's reply, a shell's attach, a run's end) is set so, on the
 * injected clock: tests move the time instead of waiting for it.
 */
export function after(clock: Clock, ms: number, fn: () => void): () => void {
  // On the system clock a plain timer: a fan-out to 10,000 devices sets two deadlines per device,
  // and an AbortController each (a signal, a listener, an abort event when cancelled) was a fifth
  // of the garbage such a fan-out made.
  if (clock === systemClock) {
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  }
  const cancel = new AbortController();
  void clock.sleep(ms, cancel.signal).then(() => {
    if (!cancel.signal.aborted) fn();
  });
  return () => cancel.abort();
}

/** Runs `fn` every `ms` of `clock`'s time until the returned function stops it. */
export function every(clock: Clock, ms: number, fn: () => void): () => void {
  const stop = new AbortController();
  void (async () => {
    while (!stop.signal.aborted) {
      await clock.sleep(ms, stop.signal);
      if (!stop.signal.aborted) fn();
    }
  })();
  return () => stop.abort();
}

/**
 * A deadline of `ms` on `clock` for an API that takes an AbortSignal (fetch): `signal` aborts with
 * a TimeoutError, as AbortSignal.timeout's does, unless `cancel` drops the deadline first.
 */
export function deadline(clock: Clock, ms: number): { signal: AbortSignal; cancel: () => void } {
  const controller = new AbortController();
  const cancel = after(clock, ms, () => controller.abort(new DOMException(`no answer within ${ms} ms`, "TimeoutError")));
  return { signal: controller.signal, cancel };
}

/** The clock's time as a Date. */
export const dateOf = (clock: Clock): Date => new Date(clock.now());

/** Who waits for news of each key (`wakeAll` ends their `sleepUntilWoken`). */
export type Wakers<K> = Map<K, Set<() => void>>;

/** Waits `ms` of `clock`'s time, less when `signal` aborts or `wakeAll(wakers, key)` is called. */
export async function sleepUntilWoken<K>(clock: Clock, ms: number, signal: AbortSignal, wakers: Wakers<K>, key: K): Promise<void> {
  const woken = new AbortController();
  const wake = () => woken.abort();
  const set = wakers.get(key) ?? new Set();
  set.add(wake);
  wakers.set(key, set);
  try {
    await clock.sleep(ms, AbortSignal.any([signal, woken.signal]));
  } finally {
    set.delete(wake);
    if (set.size === 0) wakers.delete(key);
  }
}

/** Ends the waits of `key` (sleepUntilWoken). */
export function wakeAll<K>(wakers: Wakers<K>, key: K): void {
  wakers.get(key)?.forEach((wake) => wake());
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

/** Waits `ms`; an abort of `signal` ends the wait early (it resolves, never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    // The one raw timer of the domain's waits: this is the system clock's sleep itself.
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
