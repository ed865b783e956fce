/*
 * Update progress reported over the device socket: `update_progress`
 * moves the device's record (clamped to 0..100; 100 ends it) and is broadcast as an `update`
 * event; `update_version` stores the new running version and ends the record too (a `version` event).
 */
import type { AppContext } from "../../app/context.ts";
import type { EventBroadcaster } from "../events/broadcaster.ts";
import { deleteProgressOf, getProgress, type UpdateProgress } from "../progress/progress.ts";
import { deviceMetadataOf, setDeviceMetadata } from "../devices/devices.ts";
import type { ChannelHub, DeviceConnection } from "./hub.ts";

/** What else follows a device's reports (the deployments). */
export interface ProgressListener {
  progress(deviceId: number, mac: string, percent: number): Promise<void>;
  reportedVersion(deviceId: number, version: string): Promise<void>;
}

/** Installs the handlers of `update_progress` and `update_version`; progress goes out on `events`. */
export function handleProgress(ctx: Pick<AppContext, "config" | "log" | "store">, hub: ChannelHub, progressRecords: UpdateProgress, events: EventBroadcaster, listener: ProgressListener): void {
  // One device's reports are handled in the order they came (the hub runs handlers side by side):
  // on PostgreSQL a later report's queries could otherwise finish first, its event before an earlier one's.
  const pending = new Map<number, Promise<void>>();
  const inOrder = (conn: DeviceConnection, handle: () => Promise<void>): Promise<void> => {
    const done = (pending.get(conn.deviceId) ?? Promise.resolve()).then(handle);
    const settled = done.catch(() => {});
    pending.set(conn.deviceId, settled);
    void settled.then(() => pending.get(conn.deviceId) === settled && pending.delete(conn.deviceId));
    return done;
  };

  hub.handle("update_progress", (conn: DeviceConnection, message) => inOrder(conn, async () => {
    const progress = Math.min(100, Math.max(0, Math.round(message.progress)));
    const version = (await getProgress(ctx.store.query, conn.deviceId))?.version ?? null;
    await progressRecords.reportProgress(conn.deviceId, progress);
    await listener.progress(conn.deviceId, conn.mac, progress);
    events.publish("update", { device: conn.mac, progress, version });
  }));

  hub.handle("update_version", (conn, message) => inOrder(conn, async () => {
    const { version } = message;
    const key = `${ctx.config.prefix}.software.version`;
    await ctx.store.transact(async (tx) => {
      // A broken column is replaced by what we know.
      const metadata = await deviceMetadataOf(tx, conn.deviceId);
      if (!metadata) return;
      metadata[key] = version;
      await setDeviceMetadata(tx, conn.deviceId, JSON.stringify(metadata));
      // The device runs the new version: its update is over.
      await deleteProgressOf(tx, conn.deviceId);
      // Before the commit lets other queries in (a cache, not the database): an update check
      // answered meanwhile must not take the ended record for one still waiting.
      progressRecords.forgetWaiting(conn.deviceId);
    });
    ctx.log.info(`device ${conn.mac} now runs ${version}`);
    events.publish("version", { device: conn.mac, version });
    await listener.reportedVersion(conn.deviceId, version);
  }));
}
