/*
 * Every answer's Date header, written here instead of by Node (`res.sendDate`): Node formats it with
 * toUTCString, which has V8 load ICU's time-zone data and code to look up the host's zone first
 * (memory the server keeps from its first answer on), though an HTTP date is UTC.
 * The same text (util/time.ts's rfc822), made once a second as Node makes it.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { rfc822 } from "../util/time.ts";

let second = NaN;
let text = "";

/** The Date header for `now` (ms): `Fri, 27 Nov 2026 12:22:46 GMT`. */
export function httpDate(now: number = Date.now()): string {
  const s = Math.floor(now / 1000);
  if (s !== second) {
    second = s;
    text = rfc822(new Date(s * 1000));
  }
  return text;
}

/** Has `server` write each answer's Date header itself, before any other listener sees the request. */
export function writeDateHeaders(server: Server): void {
  server.prependListener("request", (_request: IncomingMessage, response: ServerResponse) => {
    response.sendDate = false;
    response.setHeader("date", httpDate());
  });
}
