import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import { accessGeneration, type AccessWatch } from "../../auth/authority.ts";
import type { ManagementIdentity } from "../../auth/tokens.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { errors, route } from "../../http/openapi.ts";
import { prepareEvent, SharedSubscription, type EventStreams, type SendEvent } from "../../http/sse.ts";
import type { DeviceEvent, EventBroadcaster } from "./broadcaster.ts";
import { StreamEvents } from "../../protocol/streams.ts";
import { shows, visibleTo, type Visible } from "./visibility.ts";

export { MAX_BACKLOG } from "../../http/sse.ts";

/** An open stream: whose it is, what its user may read, where its events go. */
interface Viewer {
  identity: ManagementIdentity;
  sees: Visible;
  send: SendEvent;
}

/**
 * `GET /api/stream`: server-sent events `connect`, `disconnect`, `update`, `version`
 * (and `deployment`, `deployment_device`) as `event:<name>` / `data:<json>` lines. Management
 * token; a user without admin read sees the events of the devices (and deployments' groups) they
 * may read. The stream ends when its token or account no longer allows it (src/auth/authority.ts).
 *
 * An event costs the same however many streams are open: it is encoded once, and each
 * stream knows the devices and groups its user may read. Those sets are made again, once per user
 * and scopes, when the access generation has moved (a permission, a tag, a group, a device changed).
 */
export function eventsRoutes(ctx: AppContext, auth: Auth, events: EventBroadcaster, streams: EventStreams, access: AccessWatch): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const viewers = new Set<Viewer>();
  let generation = -1;

  /** What each stream's user may read, made again when the access generation has moved since. */
  const refreshVisibility = async () => {
    const now = await accessGeneration(ctx.store.query);
    if (now === generation) return;
    generation = now;
    const shared = new Map<string, Visible>();
    for (const viewer of viewers) viewer.sees = await visibleTo(ctx.store.query, await access.current(viewer.identity), shared);
  };
  // In the order they happened, the visibility read after they came: one read for all the events
  // that arrived meanwhile (a fan-out's results are thousands at once), not one per event.
  const pending: DeviceEvent[] = [];
  let draining = false;
  const drain = async () => {
    draining = true;
    try {
      while (pending.length > 0) {
        const batch = pending.splice(0);
        try {
          await refreshVisibility();
        } catch (error) {
          ctx.log.warn(`events: ${batch.length} event(s) not delivered: ${(error as Error).message}`);
          continue;
        }
        for (const event of batch) {
          const prepared = prepareEvent(event.event, event.data);
          for (const viewer of viewers) if (shows(viewer.sees, event)) viewer.send(prepared);
        }
      }
    } finally {
      draining = false;
    }
  };
  const subscription = new SharedSubscription(events, (event) => {
    pending.push(event);
    if (!draining) drain().catch((error) => ctx.log.warn(`events: ${(error as Error).message}`));
  });

  route(
    app,
    {
      method: "get",
      path: "/api/stream",
      tag: "events",
      access: "management",
      summary: `Live events (SSE): ${Object.keys(StreamEvents).join(", ")}, of the devices and groups the caller may read (docs/update-server.md, "Live events")`,
      responses: { 200: { description: "Event stream", media: "text/event-stream" }, 401: errors[401] },
    },
    auth.management(),
    async (c) => {
      const identity = c.get("identity") as ManagementIdentity;
      const sees = await visibleTo(ctx.store.query, identity, new Map());
      return streams.respond(identity, (send) => {
        const viewer: Viewer = { identity, sees, send };
        viewers.add(viewer);
        const release = subscription.hold();
        return () => {
          viewers.delete(viewer);
          release();
        };
      });
    },
  );
  return app;
}
