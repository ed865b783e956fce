/**
 * Installs labgate's own Headers, Request and Response (and the two events @hono/node-server makes
 * for WebSocket messages) as the globals, before hono and @hono/node-server are loaded: main.ts
 * imports this first, and the test runner puts it before every test file.
 *
 * Why not Node's: they are its built-in undici, whose first use loads its whole HTTP client
 * (770 KB of source, http2 and more): 4.4 MB of RSS for a server that answers with them and
 * never fetches (issue 31; README, "Footprint"). Node's own classes are still what `fetch`
 * returns, and `fetch` itself is left alone (a lab node's client, tests).
 */
import { Headers } from "./headers.ts";
import { Request } from "./request.ts";
import { Response } from "./response.ts";

/** A WebSocket message (the standard's MessageEvent, as far as a server's handlers read it). */
class MessageEvent<T = unknown> extends Event {
  readonly data: T;
  readonly origin: string;
  readonly lastEventId: string;
  readonly source = null;
  readonly ports: readonly unknown[] = [];
  constructor(type: string, init: { data?: T; origin?: string; lastEventId?: string } & EventInit = {}) {
    super(type, init);
    this.data = init.data as T;
    this.origin = init.origin ?? "";
    this.lastEventId = init.lastEventId ?? "";
  }
}

/** A WebSocket's close (the standard's CloseEvent). */
class CloseEvent extends Event {
  readonly wasClean: boolean;
  readonly code: number;
  readonly reason: string;
  constructor(type: string, init: { wasClean?: boolean; code?: number; reason?: string } & EventInit = {}) {
    super(type, init);
    this.wasClean = init.wasClean ?? false;
    this.code = init.code ?? 0;
    this.reason = init.reason ?? "";
  }
}

const globals = { Headers, Request, Response, MessageEvent, CloseEvent };
for (const [name, value] of Object.entries(globals)) {
  // Deleted first: Node 24 loads undici to redefine one of its lazy globals (not to delete one).
  delete (globalThis as Record<string, unknown>)[name];
  // As Node defines its own: writable, configurable, not enumerable.
  Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}
