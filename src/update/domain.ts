/*
 * The composition root of the update server: builds its services, installs
 * its hooks (the device gate, the device messages each service handles, what a device deletion
 * or key change ends), starts its timers and registers its shutdown work. The routers get the
 * built services (src/server/routes.ts) and only route.
 */
import type { AppContext } from "../app/context.ts";
import type { DeviceIdentity } from "../auth/tokens.ts";
import { PackageStorage } from "../storage/packages.ts";
import { ActionService } from "./actions/actions.ts";
import { deleteDeviceLog } from "./actions/store.ts";
import { ChannelHub, CLOSE_UNAUTHORIZED } from "./channel/hub.ts";
import { handleProgress } from "./channel/progress.ts";
import { ShellService } from "./channel/shell.ts";
import { handleOutcomes } from "./deployments/channel.ts";
import { DeploymentService } from "./deployments/service.ts";
import { DeviceFileStore, deviceFilesPlace } from "./devicefiles/store.ts";
import { FileTransferService } from "./devicefiles/transfers.ts";
import { DeviceHooks } from "./devices/devices.ts";
import { createDeviceGate } from "./devices/gate.ts";
import { EventBroadcaster, type DeviceEvent } from "./events/broadcaster.ts";
import { deltasChangedElsewhere, sweepOrphanObjects } from "./packages/packages.ts";
import { UpdateProgress } from "./progress/progress.ts";
import { deleteRegistrationsOf } from "./registration/registrations.ts";
import { ReplayGuard } from "./registration/replay.ts";
import { every } from "../util/time.ts";
import { UpdateCatalog } from "./updatecheck/catalog.ts";

/** The update server's services, as the routers get them. */
export interface UpdateDomain {
  /** Device tokens are good while their device exists with that key; bumps last_access (the app's auth check calls it). */
  deviceGate: (identity: DeviceIdentity) => boolean | Promise<boolean>;
  /** What a device deletion or key change ends (the gate's cache, sockets, action logs). */
  deviceHooks: DeviceHooks;
  /** Signed device authorization requests seen, refused when replayed. */
  replay: ReplayGuard;
  /** The update checks' cached inputs (active groups, group plans); group writes drop them. */
  catalog: UpdateCatalog;
  /** Update progress records and their idle time. */
  progress: UpdateProgress;
  /** Package objects (`/local_storage/`). */
  storage: PackageStorage;
  /** The start-up sweep of objects an interrupted upload left without a row: settles once it is done. */
  orphansSwept: Promise<void>;
  /** Live device events (`GET /api/stream`). */
  events: EventBroadcaster;
  /** The device sockets (`/api/v1/devices/ws`). */
  hub: ChannelHub;
  shells: ShellService;
  actions: ActionService;
  /** Files fetched from devices and action outputs. */
  deviceFiles: DeviceFileStore;
  transfers: FileTransferService;
  /** Phased rollouts to groups: their state machine, the update check's view of them. */
  deployments: DeploymentService;
}

export function createUpdateDomain(ctx: AppContext): UpdateDomain {
  // Device tokens of deleted (or re-keyed) devices are refused; last_access is kept up to date.
  const deviceHooks = new DeviceHooks();
  deviceHooks.onDeleted(async (tx, device) => void (await deleteRegistrationsOf(tx, device.mac_address)));
  const deviceGate = createDeviceGate(ctx, deviceHooks);
  const replay = new ReplayGuard();
  // What update checks answer from, dropped by every group write that changes it, on any node.
  const catalog = new UpdateCatalog(ctx.store, ctx.cluster);

  // Packages: the deltas update checks name are read again when another node made or deleted one.
  ctx.cluster.on("deltas_changed", () => deltasChangedElsewhere(ctx.store));
  // Objects an interrupted upload left without a row go (in the background).
  const storage = new PackageStorage(ctx.objects, ctx.dataDir);
  const orphansSwept = sweepOrphanObjects(ctx, storage).then(
    () => {},
    (error) => ctx.log.warn(`storage sweep failed: ${(error as Error).message}`),
  );

  // Update progress: records idle for `progress_idle_timeout` no longer count and are swept by a timer.
  const progress = new UpdateProgress(ctx.store, ctx.config.update_server.progress_idle_timeout, ctx.clock);
  const stopExpiry = every(ctx.clock, Math.min(progress.idleMs, 60_000), () => {
    if (!ctx.cluster.runs("progress_expiry")) return;
    progress.sweep().catch((error) => ctx.log.warn(`progress: idle records not removed: ${(error as Error).message}`));
  });
  ctx.onClosing.push(stopExpiry);

  // The device socket hub; every device socket goes when the server stops accepting.
  // Live events go to the streams of every node (src/cluster).
  const events = new EventBroadcaster((event) => ctx.cluster.publish("device_event", event));
  ctx.cluster.on("device_event", (event) => events.received(event as DeviceEvent));
  const hub = new ChannelHub(ctx);
  ctx.onClosing.push(() => hub.closeAll());
  hub.onConnect((conn) => events.publish("connect", { device: conn.mac }));
  hub.onDisconnect((mac) => events.publish("disconnect", { device: mac }));
  // The other nodes see where each device's socket is.
  hub.onConnect((conn) => ctx.cluster.deviceConnected(conn.mac));
  hub.onDisconnect((mac) => ctx.cluster.deviceDisconnected(mac));
  // Deployments: progress and versions move devices' states; update_outcome reports (docs/device-protocol.md).
  const deployments = new DeploymentService(ctx, catalog, events, hub, progress);
  deployments.start();
  ctx.onClosing.push(() => deployments.close());
  ctx.onShutdown.push(() => deployments.recoveriesSettled());
  handleOutcomes(hub, deployments);
  // update_progress, update_version.
  handleProgress(ctx, hub, progress, events, deployments);

  // Shell sessions end with their device's socket, and at shutdown.
  const shells = new ShellService(ctx, hub);
  hub.onDisconnect((mac) => shells.deviceGone(mac));
  ctx.onClosing.push(() => shells.endAll());

  // Remote actions: results and acknowledgements from the device; the queue goes out on connect.
  const deviceFiles = new DeviceFileStore(ctx.dataDir, ctx.config.prefix, deviceFilesPlace(ctx));
  const actions = new ActionService(ctx, hub, deviceFiles);
  deviceFiles.serveInlineActions((id) => actions.storedOutput(id));
  hub.handle("action_exec_control", (conn, message) => actions.control(conn, message));
  hub.handle("action_exec_result", (conn, message) => actions.result(conn, message));
  hub.onConnect((conn) => actions.connected(conn));

  // File download from devices: the device's replies; assembled downloads outlive their links by nothing (swept hourly).
  const transfers = new FileTransferService(ctx, hub, deviceFiles);
  hub.handle("fs_file_probe_reply", (conn, message) => transfers.probeReply(conn, message));
  hub.handle("fs_file_download_reply", (conn, message) => transfers.downloadReply(conn, message));
  const ttl = ctx.config.update_server.download_link_ttl;
  const sweepDownloads = () => void deviceFiles.sweepDownloads(ttl, ctx.clock.now()).catch((error: Error) => ctx.log.warn(`device files: sweep of old downloads: ${error.message}`));
  sweepDownloads();
  ctx.onShutdown.push(every(ctx.clock, 3600_000, sweepDownloads));

  // A deleted device loses its socket, its action log and the outputs, and leaves its deployment.
  deviceHooks.onDeleted(async (tx, device) => {
    const outputs = await deleteDeviceLog(tx, device.mac_address);
    return async () => {
      deployments.deviceDeleted(device.id);
      hub.disconnectAnywhere(device.mac_address, device.id, CLOSE_UNAUTHORIZED, "device was deleted");
      for (const key of outputs) await deviceFiles.remove(key);
    };
  });
  // A key change closes the socket opened with the earlier key; the device with the new key connects.
  deviceHooks.onRekeyed((device) => {
    hub.disconnectAnywhere(device.mac_address, device.id, CLOSE_UNAUTHORIZED, "device key changed");
  });

  return { deviceGate, deviceHooks, replay, catalog, progress, storage, orphansSwept, events, hub, shells, actions, deviceFiles, transfers, deployments };
}
