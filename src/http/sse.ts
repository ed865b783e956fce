/*
 * Server-sent event streams (the update server's `/api/stream`, the test-run server's
 * `/api/v1/test-runs/stream`): one way to write events, keep a quiet stream alive, drop a client
 * that does not read, end the stream when its token or account no longer allows it
 * (src/auth/authority.ts), and end every stream when the server closes. An event is encoded once
 * (`prepareEvent`), however many streams it goes to.
 */
import type { AccessWatch } from "../auth/authority.ts";
import type { Identity } from "../app/context.ts";
import type { Logger } from "../util/log.ts";
import { every, type Clock } from "../util/time.ts";
import { Broadcaster } from "../util/broadcaster.ts";

export { Broadcaster };

const KEEPALIVE_MS = 15_000;
/** Events queued for a client that does not read beyond this many bytes end its stream (it may reconnect). */
export const MAX_BACKLOG = 1024 * 1024;

/**
 * One subscription to `source` shared by the streams that `hold` it: made with the first, dropped
 * with the last (a server without streams listens to nothing). The listener reads and encodes
 * each value once for all of them.
 */
export class SharedSubscription<T> {
  private holders = 0;
  private stop: (() => void) | undefined;
  private readonly source: Broadcaster<T>;
  private readonly listener: (value: T) => void;

  constructor(source: Broadcaster<T>, listener: (value: T) => void) {
    this.source = source;
    this.listener = listener;
  }

  /** Holds the subscription; returns the release (once). */
  hold(): () => void {
    if (this.holders++ === 0) this.stop = this.source.subscribe(this.listener);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      if (--this.holders > 0) return;
      this.stop?.();
      this.stop = undefined;
    };
  }
}

const encoder = new TextEncoder();

/** One event as it goes on the wire: `prepareEvent("run", {...})` is `event:run` / `data:<json>`. */
export interface PreparedEvent {
  readonly bytes: Uint8Array;
}

export const prepareEvent = (event: string, data: unknown): PreparedEvent => ({ bytes: encoder.encode(`event:${event}\ndata:${JSON.stringify(data)}\n\n`) });

/** Writes one prepared event to a stream. */
export type SendEvent = (event: PreparedEvent) => void;

/** The event streams of a server: each ends with its token, all end when the server stops accepting (`endAll`). */
export class EventStreams {
  private readonly open = new Set<() => void>();
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly accessWatch: AccessWatch;
  private readonly comments: boolean;

  /** `comments` false (compat.sse_comments): no comment lines, only events, as the reference sends. */
  constructor(log: Logger, clock: Clock, accessWatch: AccessWatch, comments = true) {
    this.log = log;
    this.clock = clock;
    this.accessWatch = accessWatch;
    this.comments = comments;
  }

  endAll(): void {
    for (const end of [...this.open]) end();
  }

  /**
   * A `text/event-stream` response. `subscribe` starts sending and returns how to stop; the stream
   * starts with the comment `:ok` and ends when the client goes, the server closes, the client
   * falls more than MAX_BACKLOG behind, or `identity`'s token or account no longer allows it.
   */
  respond(identity: Identity | undefined, subscribe: (send: SendEvent) => () => void): Response {
    return eventStream(this.open, this.log, this.clock, this.accessWatch, this.comments, identity, subscribe);
  }
}

function eventStream(
  streams: Set<() => void>,
  log: Logger,
  clock: Clock,
  accessWatch: AccessWatch,
  comments: boolean,
  identity: Identity | undefined,
  subscribe: (send: SendEvent) => () => void,
): Response {
  let end = () => {};
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        let open = true;
        const write = (bytes: Uint8Array) => {
          if (!open) return;
          try {
            controller.enqueue(bytes);
          } catch {
            return end();
          }
          // A stalled client must not make the server keep every event for it.
          if ((controller.desiredSize ?? 0) < -MAX_BACKLOG) {
            log.warn("event stream client does not keep up: stream ended");
            end();
          }
        };
        const unsubscribe = subscribe((event) => write(event.bytes));
        // Comments keep proxies and idle timers from closing a quiet stream.
        const comment = (text: string) => {
          if (comments) write(encoder.encode(`:${text}\n\n`));
        };
        const stopKeepalive = every(clock, KEEPALIVE_MS, () => comment(""));
        const unwatch =
          identity?.kind === "mgmt"
            ? accessWatch.watch(identity, {
                end: (reason) => {
                  comment(` ${reason}`);
                  end();
                },
              })
            : () => {};
        end = () => {
          if (!open) return;
          open = false;
          stopKeepalive();
          unwatch();
          unsubscribe();
          streams.delete(end);
          try {
            controller.close();
          } catch {
            // Already closed by the client.
          }
        };
        streams.add(end);
        comment("ok");
      },
      cancel() {
        end();
      },
    },
    new ByteLengthQueuingStrategy({ highWaterMark: 64 * 1024 }),
  );
  return new Response(body, {
    headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no" },
  });
}
