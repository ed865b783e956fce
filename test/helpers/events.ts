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
export async function openStream(server: Pick<TestServer, "request" | "adminToken">, token = server.adminToken, path = "/api/stream"): Promise<EventStream> {
  const controller = new AbortController();
  // Through the server's own request: a TLS server's test CA is trusted there.
  const res = await server.request(path, { token, signal: controller.signal });
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

/**
 * The value of `look()` once `until` holds it, looked at again after each event of `stream` that
 * `relevant` accepts: the state is read when something that could change it happened, never on a
 * timer. The stream is open before the first look, so no change falls between the two. Fails after `ms`.
 */
export async function untilEvent<T>(stream: EventStream, look: () => Promise<T>, until: (value: T) => boolean, relevant: (event: SseEvent) => boolean, ms = 15_000, what = "condition"): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const seen = stream.events.length;
    const value = await look();
    if (until(value)) return value;
    await stream.next((e) => stream.events.indexOf(e) >= seen && relevant(e), Math.max(0, deadline - Date.now()), what);
  }
}

/**
 * The deployment view (GET /api/v2/deployments/{id}) once `until` holds it, looked at again on each
 * `deployment` or `deployment_device` event of that deployment on /api/stream. Fails after `ms`.
 */
export async function untilDeployment<T = Record<string, any>>(server: Pick<TestServer, "request" | "adminToken" | "call">, id: number, until: (view: T) => boolean, ms = 15_000, what = `deployment ${id}`): Promise<T> {
  return untilDeploymentLooks(server, id, async () => (await server.call<T>("GET", `/api/v2/deployments/${id}`)).body, until, ms, what);
}

/** untilDeployment with another look (its devices, one device's state), on the same events. */
export async function untilDeploymentLooks<T>(server: Pick<TestServer, "request" | "adminToken">, id: number, look: () => Promise<T>, until: (value: T) => boolean, ms = 15_000, what = `deployment ${id}`): Promise<T> {
  const stream = await openStream(server);
  try {
    const ofIt = (e: SseEvent) => (e.event === "deployment" || e.event === "deployment_device") && e.data.deployment === id;
    return await untilEvent(stream, look, until, ofIt, ms, what);
  } finally {
    stream.close();
  }
}
