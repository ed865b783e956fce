/*
 * Server-sent event streams (the update server's `/api/stream`, the test-run server's
 * `/api/v1/test-runs/stream`): one way to write events, keep a quiet stream alive, drop a client
 * that does not read, end the stream when its token expires or is revoked, and end every stream
 * when the server closes.
 */
import { tokenWatchOf } from "../auth/revocations.ts";
import { perServer, type AppContext, type Identity } from "../server/context.ts";

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

/** The open streams of a server, ended when it stops accepting. */
const openStreams = perServer((ctx) => {
  const ends = new Set<() => void>();
  ctx.onClosing.push(() => {
    for (const end of [...ends]) end();
  });
  return ends;
});

/** Writes one event: `send("run", {...})` becomes `event:run` / `data:<json>`. */
export type SendEvent = (event: string, data: unknown) => void;

/**
 * A `text/event-stream` response. `subscribe` starts sending and returns how to stop; the stream
 * starts with the comment `:ok` and ends when the client goes, the server closes, the client
 * falls more than MAX_BACKLOG behind, or `identity`'s management token expires or is revoked.
 */
export function eventStreamResponse(ctx: AppContext, identity: Identity | undefined, subscribe: (send: SendEvent) => () => void): Response {
  const streams = openStreams(ctx);
  const tokenWatch = tokenWatchOf(ctx);
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
            ctx.log.warn("event stream client does not keep up: stream ended");
            end();
          }
        };
        const unsubscribe = subscribe((event, data) => write(`event:${event}\ndata:${JSON.stringify(data)}\n\n`));
        // Comments keep proxies and idle timers from closing a quiet stream.
        const keepalive = setInterval(() => write(":\n\n"), KEEPALIVE_MS);
        const unwatch =
          identity?.kind === "mgmt"
            ? tokenWatch.watch(identity, (reason) => {
                write(`: ${reason}\n\n`);
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
        write(":ok\n\n");
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
