import type { DeviceIdentity } from "../../auth/tokens.ts";
import type { AppContext } from "../../app/context.ts";
import type { DeviceHooks } from "./devices.ts";
import { isoTime } from "../../util/time.ts";

/** Devices the gate has seen, at most (a lab has far fewer; past it the cache starts over). */
const MAX_KNOWN = 100_000;

/**
 * The device-token gate (the update domain's `deviceGate`, called by the auth check): a token is only good while its device exists with the
 * same id, MAC and key (deleted devices are refused at once, ids are never reused; an approved key
 * change ends every token issued for the earlier key at once). Every accepted
 * request bumps the device's last_access, lazily persisted and at most once per second.
 *
 * Device tokens come with every update check, so both halves avoid SQL per request: devices
 * found once are remembered (MACs never change; a deletion evicts through DeviceHooks, a
 * database reload drops everything), and the last_access updates of all requests of one event
 * loop turn are written as one lazy transaction just after it (setImmediate), before any
 * request that follows an answer of this turn is read.
 */
export function createDeviceGate(ctx: Pick<AppContext, "clock" | "db" | "log" | "onShutdown">, hooks: DeviceHooks): (identity: DeviceIdentity) => boolean {
  /** Device id -> its MAC, key fingerprint and the last_access last written (or read) for it. */
  let known = new Map<number, { mac: string; key: string; lastAccess: string | null }>();
  let epoch = ctx.db.epoch;
  const pending = new Map<number, string>();
  let flushScheduled = false;

  hooks.onDeleted((_tx, device) => {
    known.delete(device.id);
    pending.delete(device.id);
  });
  hooks.onRekeyed((device) => void known.delete(device.id));
  ctx.onShutdown.push(() => flush());

  function flush(): void {
    flushScheduled = false;
    if (pending.size === 0) return;
    const updates = [...pending];
    pending.clear();
    try {
      ctx.db.writeLazy((tx) => {
        for (const [id, time] of updates) tx.run("UPDATE devices SET last_access = ? WHERE id = ?", [time, id]);
      });
    } catch (error) {
      // A last-seen time is not worth failing anything over; the next request records it again.
      for (const [id] of updates) known.delete(id);
      ctx.log.warn(`last_access of ${updates.length} device(s) not recorded: ${(error as Error).message}`);
    }
  }

  return (identity) => {
    if (epoch !== ctx.db.epoch) {
      known = new Map();
      pending.clear();
      epoch = ctx.db.epoch;
    }
    let device = known.get(identity.deviceId);
    if (!device) {
      const row = ctx.db.get<{ mac_address: string; key_fingerprint: string | null; last_access: string | null }>(
        "SELECT mac_address, key_fingerprint, last_access FROM devices WHERE id = ?",
        [identity.deviceId],
      );
      if (!row) return false;
      if (known.size >= MAX_KNOWN) known.clear();
      known.set(identity.deviceId, (device = { mac: row.mac_address, key: row.key_fingerprint ?? "", lastAccess: row.last_access }));
    }
    if (device.mac !== identity.mac || device.key !== identity.key) return false;
    const now = isoTime(Math.floor(ctx.clock.now() / 1000) * 1000);
    if (device.lastAccess !== now) {
      device.lastAccess = now;
      pending.set(identity.deviceId, now);
      if (!flushScheduled) {
        flushScheduled = true;
        setImmediate(flush);
      }
    }
    return true;
  };
}
