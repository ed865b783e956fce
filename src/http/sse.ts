/*
 * Server-sent event streams (the update server's `/api/stream`, the test-run server's
 * `/api/v1/test-runs/stream`): one way to write events, keep a quiet stream alive, drop a client
 * that does not read, end the stream when its token expires or is revoked, and end every stream
 * when the server closes.
 */
import type { TokenWatch } from "../auth/revocations.ts";
import type { Identity } from "../app/context.ts";
import type { Logger } from "../util/log.ts";

const KEEPALIVE_MS = 15_000;
/** Events queued for a client that does not read beyond this many bytes end its stream (it may reconnect). */
export const MAX_BACKLOG = 1024 * 1024;

/** In-process publish/subscribe: one broken subscriber never stops the others (or the publisher). */
export class Broadcaster<T> {
  private readonly listeners = new Set<(value: T) => void>();

  subscribe(listener: (value: T) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  emit(value: T): void {
    for (const listener of this.listeners) {
      try {
        listener(value);
      } catch {
        // ignored: see the class comment
      }
    }
  }

  get subscribers(): number {
    return this.listeners.size;
  }
}

/** Writes one event: `send("run", {...})` becomes `event:run` / `data:<json>`. */
export type SendEvent = (event: string, data: unknown) => void;

/** The event streams of a server: each ends with its token, all end when the server stops accepting (`endAll`). */
export class EventStreams {
  private readonly open = new Set<() => void>();
  private readonly log: Logger;
  private readonly tokenWatch: TokenWatch;
  private readonly comments: boolean;

  /** `comments` false (compat.sse_comments): no comment lines, only events, as the reference sends. */
  constructor(log: Logger, tokenWatch: TokenWatch, comments = true) {
    this.log = log;
    this.tokenWatch = tokenWatch;
    this.comments = comments;
  }

  endAll(): void {
    for (const end of [...this.open]) end();
  }

  /**
   * A `text/event-stream` response. `subscribe` starts sending and returns how to stop; the stream
   * starts with the comment `:ok` and ends when the client goes, the server closes, the client
   * falls more than MAX_BACKLOG behind, or `identity`'s management token expires or is revoked.
   */
  respond(identity: Identity | undefined, subscribe: (send: SendEvent) => () => void): Response {
    return eventStream(this.open, this.log, this.tokenWatch, this.comments, identity, subscribe);
  }
}

function eventStream(
  streams: Set<() => void>,
  log: Logger,
  tokenWatch: TokenWatch,
  comments: boolean,
  identity: Identity | undefined,
  subscribe: (send: SendEvent) => () => void,
): Response {
  const encoder = new TextEncoder();
  let end = () => {};
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        let open = true;
        const write = (text: string) => {
          if (!open) return;
          try {
            controller.enqueue(encoder.encode(text));
          } catch {
            return end();
          }
          // A stalled client must not make the server keep every event for it.
          if ((controller.desiredSize ?? 0) < -MAX_BACKLOG) {
            log.warn("event stream client does not keep up: stream ended");
            end();
          }
        };
        const unsubscribe = subscribe((event, data) => write(`event:${event}\ndata:${JSON.stringify(data)}\n\n`));
        // Comments keep proxies and idle timers from closing a quiet stream.
        const comment = (text: string) => {
          if (comments) write(`:${text}\n\n`);
        };
        const keepalive = setInterval(() => comment(""), KEEPALIVE_MS);
        const unwatch =
          identity?.kind === "mgmt"
            ? tokenWatch.watch(identity, (reason) => {
                comment(` ${reason}`);
                end();
              })
            : () => {};
        end = () => {
          if (!open) return;
          open = false;
          clearInterval(keepalive);
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
