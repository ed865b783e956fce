import { Readable } from "node:stream";
import { setImmediate as nextTurn } from "node:timers/promises";
import type { Context } from "hono";
import type { JsonReply } from "./openapi.ts";

/**
 * A JSON array answer made from `pages` as the client reads it: the same bytes as `c.json(all)`
 * (`[...]` and a newline) with memory for one page, and the event loop free between pages.
 */
export function jsonArrayStream(pages: Iterable<unknown[]> | AsyncIterable<unknown[]>): ReadableStream<Uint8Array> {
  async function* text(): AsyncGenerator<string> {
    let first = true;
    yield "[";
    for await (const page of pages) {
      if (page.length === 0) continue;
      yield (first ? "" : ",") + page.map((item) => JSON.stringify(item)).join(",");
      first = false;
      await nextTurn();
    }
    yield "]\n";
  }
  return Readable.toWeb(Readable.from(text(), { objectMode: false })) as ReadableStream<Uint8Array>;
}

/** `pages` streamed as a route's 200 reply: typed as the array `c.json` would answer, so it is checked against the operation alike. */
export const jsonArrayReply = <T>(c: Context, pages: Iterable<T[]> | AsyncIterable<T[]>): JsonReply<200, T[]> =>
  c.body(jsonArrayStream(pages), 200, { "Content-Type": "application/json" }) as unknown as JsonReply<200, T[]>;
