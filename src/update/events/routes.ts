import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { getDeviceByMac } from "../devices/devices.ts";
import { allowed, bypasses } from "../permissions/permissions.ts";
import { eventsOf, type DeviceEvent } from "./broadcaster.ts";
import { tokenWatchOf } from "../../auth/revocations.ts";

const KEEPALIVE_MS = 15_000;
/** Events queued for a client that does not read beyond this many bytes end its stream (it may reconnect). */
export const MAX_BACKLOG = 1024 * 1024;

/**
 * `GET /api/stream` (update-server.md 15.1): server-sent events `connect`, `disconnect`, `update`
 * as `event:<name>` / `data:<json>` lines. Management token; a user without admin read sees the
 * events of the devices they may read. The stream ends when its token expires or is revoked.
 */
export function eventsRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const events = eventsOf(ctx);
  const tokenWatch = tokenWatchOf(ctx);
  const streams = new Set<() => void>();
  ctx.onClosing.push(() => {
    for (const end of [...streams]) end();
  });
  const app = new Hono<AppEnv>();

  app.get("/api/stream", auth.management(), (c) => {
    const identity = c.get("identity");
    const visible = (event: DeviceEvent): boolean => {
      if (bypasses(identity, "read")) return true;
      const device = getDeviceByMac(ctx.db, event.data.device);
      return device !== undefined && allowed(ctx.db, identity, "device", device.id, "read");
    };
    const encoder = new TextEncoder();
    let end = () => {};
    const body = new ReadableStream<Uint8Array>({
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
        const unsubscribe = events.subscribe((event) => {
          if (visible(event)) write(`event:${event.event}\ndata:${JSON.stringify(event.data)}\n\n`);
        });
        // Comments keep proxies and idle timers from closing a quiet stream.
        const keepalive = setInterval(() => write(":\n\n"), KEEPALIVE_MS);
        const unwatch = identity.kind === "mgmt" ? tokenWatch.watch(identity, (reason) => {
          write(`: ${reason}\n\n`);
          end();
        }) : () => {};
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
    }, new ByteLengthQueuingStrategy({ highWaterMark: 64 * 1024 }));
    return new Response(body, {
      headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no" },
    });
  });
  return app;
}
