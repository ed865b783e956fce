import type { DeviceIdentity } from "../../auth/tokens.ts";
import type { AppContext } from "../../app/context.ts";
import type { DeviceHooks } from "./devices.ts";
import { isoTime } from "../../util/time.ts";
import { prepared } from "../../db/prepared.ts";
import type { Queries } from "../../db/store.ts";

const gateRow = prepared((q: Queries, id: number) => q.selectFrom("devices").select(["mac_address", "key_fingerprint", "last_access"]).where("id", "=", id));

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
 * loop turn are written lazily just after it (setImmediate), before any
 * request that follows an answer of this turn is read (one statement per second they name). A
 * device read while it was deleted or re-keyed is answered from that read but not remembered.
 */
export function createDeviceGate(ctx: Pick<AppContext, "clock" | "cluster" | "log" | "onShutdown" | "store">, hooks: DeviceHooks): (identity: DeviceIdentity) => boolean | Promise<boolean> {
  /** Device id -> its MAC, key fingerprint and the last_access last written (or read) for it. */
  let known = new Map<number, { mac: string; key: string; lastAccess: string | null }>();
  let epoch = ctx.store.epoch;
  /** Counts the deletions and key changes committed: a read that overlapped one is not remembered. */
  let changes = 0;
  const pending = new Map<number, string>();
  let flushScheduled = false;

  const forget = (id: number) => {
    changes++;
    known.delete(id);
    pending.delete(id);
  };
  /** Forgotten here, and on the other nodes of a cluster (each remembers the devices it saw). */
  const forgetEverywhere = (id: number) => {
    forget(id);
    ctx.cluster.publish("device_gate_changed", id);
  };
  ctx.cluster.on("device_gate_changed", (id) => {
    if (typeof id === "number") forget(id);
  });
  // Forgotten at once (harmless if the deletion rolls back) and again once committed, for a read that overlapped it.
  hooks.onDeleted(async (_tx, device) => {
    forget(device.id);
    return () => forgetEverywhere(device.id);
  });
  hooks.onRekeyed((device) => forgetEverywhere(device.id));
  ctx.onShutdown.push(() => flush());

  function flush(): void {
    flushScheduled = false;
    if (pending.size === 0) return;
    // The devices of one turn were mostly seen within one second: one statement per time.
    const byTime = new Map<string, number[]>();
    for (const [id, time] of pending) byTime.set(time, [...(byTime.get(time) ?? []), id]);
    pending.clear();
    for (const [time, ids] of byTime) {
      try {
        ctx.store.writeLazy(ctx.store.query.updateTable("devices").set({ last_access: time }).where("id", "in", ids));
      } catch (error) {
        // A last-seen time is not worth failing anything over; the next request records it again.
        for (const id of ids) known.delete(id);
        ctx.log.warn(`last_access of ${ids.length} device(s) not recorded: ${(error as Error).message}`);
      }
    }
  }

  /** A device not remembered yet: read, and remembered unless a deletion, key change or reload came meanwhile. */
  async function lookUp(identity: DeviceIdentity): Promise<boolean> {
    const before = { changes, epoch };
    const row = (await gateRow(ctx.store.query, identity.deviceId)).rows[0];
    if (!row) return false;
    const device = { mac: row.mac_address, key: row.key_fingerprint ?? "", lastAccess: row.last_access };
    if (before.changes === changes && before.epoch === ctx.store.epoch) {
      if (known.size >= MAX_KNOWN) known.clear();
      known.set(identity.deviceId, device);
    }
    return admit(identity, device);
  }

  /** The current second as last_access holds it, formatted once per second rather than per request. */
  let second = { ms: NaN, text: "" };
  const currentSecond = (): string => {
    const ms = Math.floor(ctx.clock.now() / 1000) * 1000;
    if (ms !== second.ms) second = { ms, text: isoTime(ms) };
    return second.text;
  };

  function admit(identity: DeviceIdentity, device: { mac: string; key: string; lastAccess: string | null }): boolean {
    if (device.mac !== identity.mac || device.key !== identity.key) return false;
    const now = currentSecond();
    if (device.lastAccess !== now) {
      device.lastAccess = now;
      pending.set(identity.deviceId, now);
      if (!flushScheduled) {
        flushScheduled = true;
        setImmediate(flush);
      }
    }
    return true;
  }

  // A device already remembered is answered at once, without a query or a wait.
  return (identity) => {
    if (epoch !== ctx.store.epoch) {
      known = new Map();
      pending.clear();
      epoch = ctx.store.epoch;
    }
    const device = known.get(identity.deviceId);
    return device ? admit(identity, device) : lookUp(identity);
  };
}
