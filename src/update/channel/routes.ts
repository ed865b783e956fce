import { Hono, type Context, type MiddlewareHandler } from "hono";
import { upgradeWebSocket } from "@hono/node-server";
import type { WSContext } from "hono/ws";
import type { WebSocket } from "ws";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { CLOSE_UNAUTHORIZED, type ChannelHub, type DeviceConnection } from "./hub.ts";
import { deviceByMac } from "./access.ts";
import type { DeviceRow } from "../devices/devices.ts";
import { CLOSE_INVALID, MAX_EARLY_BYTES, notConnected, size, type ShellService, type ShellSession } from "./shell.ts";
import { closeReason } from "../../protocol/labgate/wire.ts";
import type { AccessWatch } from "../../auth/authority.ts";
import { allowed, MSG_FORBIDDEN } from "../permissions/permissions.ts";
import { actorOf } from "../../http/actor.ts";
import { errors, queryOf, route, type Operation } from "../../http/openapi.ts";
import { ShellQuery } from "./schema.ts";
import { relayShell, type ShellRelay } from "./relay.ts";

/** What every WebSocket route answers: 101 and the socket, or 426 to a plain GET. */
const socket = (access: Operation["access"], summary: string, refusals: Operation["responses"]) => ({
  tag: "channel",
  access,
  summary,
  websocket: true as const,
  responses: { 101: { description: "Upgraded" }, ...refusals, 426: { description: "Not a WebSocket upgrade", json: errors[400].json } },
});

/** WebSocket routes answer a plain GET with 426 (after authorization, before any upgrade). */
const requireUpgrade: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (c.req.header("upgrade")?.toLowerCase() !== "websocket") throw new LabgateError("upgrade_required", "this route expects a WebSocket upgrade");
  await next();
};

/** WebSocket frames as the relay takes them: text as string, binary as bytes. */
const frameOf = (data: unknown): string | ArrayBuffer | undefined =>
  typeof data === "string" || data instanceof ArrayBuffer ? data : undefined;

/**
 * `GET /api/v1/devices/ws`: the device management socket, device token in the handshake (refused
 * with a plain 401 before any upgrade); the shell sockets. docs/device-protocol.md.
 */
export function channelRoutes(ctx: AppContext, auth: Auth, hub: ChannelHub, shells: ShellService, accessWatch: AccessWatch): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  route(
    app,
    { method: "get", path: "/api/v1/devices/ws", ...socket("device", "The device management socket (docs/device-protocol.md)", { 401: errors[401] }) },
    auth.device(),
    requireUpgrade,
    upgradeWebSocket((c) => {
      const identity = c.get("identity");
      let conn: DeviceConnection | undefined;
      return {
        onOpen: (_event, ws: WSContext) => {
          if (identity.kind !== "device") return ws.close(CLOSE_UNAUTHORIZED, "unauthorized");
          conn = hub.opened(identity.mac, identity.deviceId, ws);
        },
        onMessage: (event) => {
          if (conn) hub.message(conn, event.data);
        },
        onClose: () => {
          if (conn) hub.closed(conn);
        },
      };
    }),
  );

  // Shell sessions. The manager's browser cannot set headers on a WebSocket: the token may
  // come as `?token=`. The `shell` permission is checked before the upgrade, except that an unknown
  // device (or one hidden from the caller) is upgraded and closed with 4001 like an offline one,
  // as the reference does: a browser cannot read an HTTP status on a failed WebSocket.
  const shellTarget = async (c: Context<AppEnv>) => {
    try {
      return await deviceByMac(ctx.store.query, c.get("identity"), c.req.param("mac") ?? "", "shell");
    } catch (error) {
      if (error instanceof LabgateError && error.code === "not_found") return undefined;
      throw error;
    }
  };
  /** The device of a shell request, found before the upgrade (whose callback cannot wait). */
  const shellTargets = new WeakMap<Context<AppEnv>, DeviceRow | undefined>();
  const managerAuth: MiddlewareHandler<AppEnv> = async (c, next) => {
    const { token: query } = queryOf(c, ShellQuery);
    c.set("identity", await auth.authenticate(c, "mgmt", query !== undefined ? `Bearer token=${query}` : undefined));
    await next();
  };
  route(
    app,
    {
      method: "get",
      path: "/api/v1/devices/:mac/shell",
      ...socket("management", "A shell session on the device (token also as ?token=); an unknown or offline device is closed with 4001", { 401: errors[401], 403: errors[403] }),
      query: ShellQuery,
    },
    managerAuth,
    async (c, next) => {
      shellTargets.set(c, await shellTarget(c));
      await next();
    },
    requireUpgrade,
    upgradeWebSocket((c) => {
      const device = shellTargets.get(c);
      const identity = c.get("identity");
      const actor = actorOf(c, ctx.clock);
      const mac = c.req.param("mac") ?? "";
      let session: ShellSession | undefined;
      // Frames that come while the device is asked: bounded in bytes like the session's own.
      let early: Array<string | ArrayBuffer> | undefined = [];
      let earlyBytes = 0;
      let unwatch = () => {};
      let relay: ShellRelay | undefined;
      // What the other node needs to authenticate the manager, should the session go through it.
      const token = c.req.query("token");
      const credentials: Record<string, string> = {};
      for (const name of ["authorization", "cookie", "origin"]) {
        const value = c.req.header(name);
        if (value) credentials[name] = value;
      }
      return {
        onOpen: (_event, ws: WSContext) => {
          if (!device) return ws.close(CLOSE_INVALID, closeReason(notConnected(mac)));
          // The session ends with the manager's token or account, or when the shell permission goes.
          if (identity.kind === "mgmt") {
            unwatch = accessWatch.watch(identity, {
              end: (reason) => ws.close(CLOSE_UNAUTHORIZED, reason),
              check: async (current) => ((await allowed(ctx.store.query, current, "device", device.id, "shell")) ? undefined : MSG_FORBIDDEN),
            });
          }
          // The device's socket is on another node: the session goes through it.
          const peer = hub.get(device.mac_address) ? undefined : ctx.cluster.locate(device.mac_address);
          if (peer?.url) {
            const target = `${peer.url.replace(/^http/, "ws")}/api/v1/devices/${encodeURIComponent(device.mac_address)}/shell${token ? `?token=${encodeURIComponent(token)}` : ""}`;
            relay = relayShell(ws.raw as WebSocket, target, credentials, ctx.log, peer.name);
            for (const frame of early ?? []) relay.fromManager(frame);
            early = undefined;
            return;
          }
          void shells.open(device.mac_address, device.id, ws.raw as WebSocket, actor).then((opened) => {
            session = opened;
            // Frames that came while the device was asked go first, in order.
            for (const frame of early ?? []) if (session) shells.fromManager(session, frame);
            early = undefined;
          }, (error: Error) => {
            ctx.log.error(`shell session for ${device.mac_address}: ${error.message}`);
            ws.close(1011, "shell session failed");
          });
        },
        onMessage: (event, ws: WSContext) => {
          const frame = frameOf(event.data);
          if (frame === undefined) return;
          if (relay) relay.fromManager(frame);
          else if (session) shells.fromManager(session, frame);
          else if (early) {
            earlyBytes += size(frame);
            if (earlyBytes <= MAX_EARLY_BYTES) early.push(frame);
            else {
              early = undefined;
              ws.close(CLOSE_INVALID, "too much input before the device attached");
            }
          }
        },
        onClose: (event) => {
          unwatch();
          early = undefined;
          relay?.closed(event.code, event.reason);
          if (session) shells.closed(session, event.code, event.reason);
        },
      };
    }),
  );

  // The device's end of a session: its token must name the device of the path.
  route(
    app,
    { method: "get", path: "/api/v1/devices/:mac/shell/attach/:uuid", ...socket("device", "The device's end of a shell session", { 401: errors[401], 403: errors[403] }) },
    auth.device(),
    async (c, next) => {
      const identity = c.get("identity");
      if (identity.kind !== "device" || identity.mac.toLowerCase() !== (c.req.param("mac") ?? "").toLowerCase()) {
        throw new LabgateError("forbidden", "the device token does not belong to the device in the path");
      }
      await next();
    },
    requireUpgrade,
    upgradeWebSocket((c) => {
      const identity = c.get("identity");
      const uuid = c.req.param("uuid") ?? "";
      let session: ShellSession | undefined;
      return {
        onOpen: (_event, ws: WSContext) => {
          if (identity.kind === "device") session = shells.attach(identity.mac, uuid, ws.raw as WebSocket);
        },
        onMessage: (event) => {
          const frame = frameOf(event.data);
          if (session && frame !== undefined) shells.fromDevice(session, frame);
        },
        onClose: (event) => {
          if (session) shells.closed(session, event.code, event.reason);
        },
      };
    }),
  );
  return app;
}
