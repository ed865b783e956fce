import { Hono } from "hono";
import { upgradeWebSocket } from "@hono/node-server";
import type { WSContext } from "hono/ws";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { httpError } from "../../http/errors.ts";
import { getDevice, onDeviceDeleted } from "../devices/devices.ts";
import { deviceFilesOf } from "../devicefiles/store.ts";
import { channelOf, CLOSE_UNAUTHORIZED, type DeviceConnection } from "./hub.ts";
import { handleProgress } from "./progress.ts";

/**
 * `GET /api/v1/devices/ws` (update-server.md 13.1): the device management socket, device token in
 * the handshake (refused with a plain 401 before any upgrade).
 */
export function channelRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const hub = channelOf(ctx);
  handleProgress(ctx, hub);

  // A deleted device loses its socket, its action log and the outputs (17.18).
  const unhook = onDeviceDeleted((tx, device) => {
    const outputs = tx.all<{ output_key: string | null }>("SELECT output_key FROM action_log WHERE mac_address = ?", [device.mac_address]);
    tx.run("DELETE FROM action_log WHERE mac_address = ?", [device.mac_address]);
    // After the transaction: act only if the device is gone from this server's database
    // (hooks are process-wide; tests run several servers).
    setImmediate(() => {
      if (getDevice(ctx.db, device.id)) return;
      const conn = hub.get(device.mac_address);
      if (conn && conn.deviceId === device.id) hub.disconnect(device.mac_address, CLOSE_UNAUTHORIZED, "device was deleted");
      const files = deviceFilesOf(ctx);
      for (const { output_key } of outputs) void files.remove(output_key);
    });
  });
  ctx.onShutdown.push(unhook);

  const app = new Hono<AppEnv>();
  app.get(
    "/api/v1/devices/ws",
    auth.device(),
    async (c, next) => {
      if (c.req.header("upgrade")?.toLowerCase() !== "websocket") throw httpError(426, "this route expects a WebSocket upgrade");
      await next();
    },
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
  return app;
}
