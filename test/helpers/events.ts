import type { TestServer } from "./server.ts";

export interface SseEvent {
  event: string;
  data: Record<string, unknown>;
}

export interface EventStream {
  events: SseEvent[];
  status: number;
  close: () => void;
  /** All text once the server ends the stream. */
  ended: Promise<string>;
  /** The first event (already received or still to come) that `match` accepts; fails after `ms`. */
  next(match: (event: SseEvent) => boolean, ms?: number, what?: string): Promise<SseEvent>;
}

/** Reads `/api/stream` (or another event stream at `path`) in the background; `events` fills as they arrive. */
export async function openStream(server: TestServer, token = server.adminToken, path = "/api/stream"): Promise<EventStream> {
  const controller = new AbortController();
  const res = await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer token=${token}` }, signal: controller.signal });
  const events: SseEvent[] = [];
  const waiters = new Set<(event: SseEvent) => void>();
  let ended: Promise<string> = Promise.resolve("");
  if (res.status === 200 && res.body) {
    ended = (async () => {
      let buffer = "";
      let all = "";
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          const text = decoder.decode(chunk, { stream: true });
          buffer += text;
          all += text;
          let cut: number;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const event = /^event:(.*)$/m.exec(block)?.[1];
            const data = /^data:(.*)$/m.exec(block)?.[1];
            if (!event || !data) continue;
            const parsed = { event, data: JSON.parse(data) as Record<string, unknown> };
            events.push(parsed);
            for (const waiter of [...waiters]) waiter(parsed);
          }
        }
      } catch {
        // Aborted.
      }
      return all;
    })();
  }
  const next = (match: (event: SseEvent) => boolean, ms = 5000, what = "event") =>
    new Promise<SseEvent>((resolve, reject) => {
      const seen = events.find(match);
      if (seen) return resolve(seen);
      const timer = setTimeout(() => {
        waiters.delete(waiter);
        reject(new Error(`timed out waiting for ${what}`));
      }, ms);
      const waiter = (event: SseEvent) => {
        if (!match(event)) return;
        clearTimeout(timer);
        waiters.delete(waiter);
        resolve(event);
      };
      waiters.add(waiter);
    });
  return { events, status: res.status, close: () => controller.abort(), ended, next };
}
