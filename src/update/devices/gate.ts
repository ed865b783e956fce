import type { DeviceIdentity } from "../../auth/tokens.ts";
import type { AppContext } from "../../server/context.ts";

/**
 * The device-token gate (ctx.deviceGate): a token is only good while its device exists with the
 * same id and MAC (deleted devices are refused at once; ids are never reused). Every accepted
 * request bumps the device's last_access, lazily persisted and at most once per second.
 */
export function createDeviceGate(ctx: AppContext): (identity: DeviceIdentity) => boolean {
  return (identity) => {
    const row = ctx.db.get<{ last_access: string | null }>("SELECT last_access FROM devices WHERE id = ? AND mac_address = ?", [
      identity.deviceId,
      identity.mac,
    ]);
    if (!row) return false;
    const now = new Date(Math.floor(Date.now() / 1000) * 1000).toISOString();
    if (row.last_access !== now) {
      try {
        ctx.db.writeLazy((tx) => void tx.run("UPDATE devices SET last_access = ? WHERE id = ?", [now, identity.deviceId]));
      } catch (error) {
        // A last-seen time is not worth failing the device's request over.
        ctx.log.warn(`last_access of device ${identity.deviceId} not recorded: ${(error as Error).message}`);
      }
    }
    return true;
  };
}
