import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import type { EventStreams } from "../../http/sse.ts";
import { getDeviceByMac } from "../devices/devices.ts";
import { allowed, bypasses } from "../permissions/permissions.ts";
import type { DeviceEvent, EventBroadcaster } from "./broadcaster.ts";

export { MAX_BACKLOG } from "../../http/sse.ts";

/**
 * `GET /api/stream` (update-server.md 15.1): server-sent events `connect`, `disconnect`, `update`
 * (and `deployment`, `deployment_device`) as `event:<name>` / `data:<json>` lines. Management
 * token; a user without admin read sees the events of the devices (and deployments' groups) they may read. The stream ends when its token expires or is revoked.
 */
export function eventsRoutes(ctx: AppContext, auth: Auth, events: EventBroadcaster, streams: EventStreams): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.get("/api/stream", auth.management(), (c) => {
    const identity = c.get("identity");
    const visible = (event: DeviceEvent): boolean => {
      if (bypasses(identity, "read")) return true;
      if (event.event === "deployment" || event.event === "deployment_device") return allowed(ctx.db, identity, "group", event.data.group, "read");
      const device = getDeviceByMac(ctx.db, String(event.data.device));
      return device !== undefined && allowed(ctx.db, identity, "device", device.id, "read");
    };
    return streams.respond(identity, (send) =>
      events.subscribe((event) => {
        if (visible(event)) send(event.event, event.data);
      }),
    );
  });
  return app;
}
