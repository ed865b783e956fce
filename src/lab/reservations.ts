/*
 * Board reservations: a user holds a device until a time (refreshable by its holder, released by
 * DELETE or by the time passing; an administrator may break it). While it is held, no one else's
 * test run goes to it (refuseReserved, called where a run's devices are resolved) and a
 * deployment's validation run waits for it (untilFree). A row past its
 * `until` holds nothing and is replaced by the next reservation.
 */
import { recordAudit, type Actor } from "../audit/audit.ts";
import type { AppContext, Identity } from "../app/context.ts";
import type { Queries, Store } from "../db/store.ts";
import { getDevice } from "../update/devices/devices.ts";
import { allowed, authorize, bypasses, MSG_FORBIDDEN } from "../update/permissions/permissions.ts";
import { LabgateError } from "../util/errors.ts";
import { isoTime, sleepUntilWoken, wakeAll, type Wakers } from "../util/time.ts";

export interface Reservation {
  holder: string;
  note: string;
  since: string;
  until: string;
}

export interface ReservationView {
  device_id: number;
  reserved: boolean;
  holder: string | null;
  note: string | null;
  since: string | null;
  until: string | null;
}

const COLUMNS = ["holder", "note", "since", "until"] as const;

/** The reservation holding `deviceId` at `now`, if any. */
export async function reservationOf(q: Queries, deviceId: number, now: number): Promise<Reservation | undefined> {
  return q.selectFrom("lab_reservations").select(COLUMNS).where("device_id", "=", deviceId).where("until", ">", isoTime(now)).executeTakeFirst();
}

/** A 409 naming every device of `devices` someone other than `identity`'s user holds at `now`. */
export async function refuseReserved(q: Queries, identity: Identity, devices: ReadonlyArray<{ id: number; name: string }>, now: number): Promise<void> {
  const user = identity.kind === "mgmt" ? identity.user : undefined;
  const unique = [...new Map(devices.map((d) => [d.id, d])).values()];
  if (unique.length === 0) return;
  const rows = await q
    .selectFrom("lab_reservations")
    .select(["device_id", ...COLUMNS])
    .where("device_id", "in", unique.map((d) => d.id))
    .where("until", ">", isoTime(now))
    .execute();
  const byDevice = new Map(rows.map((r) => [r.device_id, r]));
  const held = unique.flatMap((d) => {
    const r = byDevice.get(d.id);
    return r && r.holder !== user ? [`'${d.name}' is reserved by ${r.holder} until ${r.until}`] : [];
  });
  if (held.length > 0) throw new LabgateError("conflict", `device ${held.join(", ")}`);
}

const view = (deviceId: number, r: Reservation | undefined): ReservationView => ({
  device_id: deviceId,
  reserved: r !== undefined,
  holder: r?.holder ?? null,
  note: r?.note ?? null,
  since: r?.since ?? null,
  until: r?.until ?? null,
});

export class ReservationService {
  private readonly ctx: AppContext;
  private readonly store: Store;
  /**
   * Device id -> until when it is held (ms), the table as this service wrote it: every update
   * check of a deployment's device asks (holds), which must not wait for the database.
   */
  private held = new Map<number, number>();
  private epoch = -1;
  /** Who waits for each device's reservation to end (untilFree), woken when it changes. */
  private readonly waiters: Wakers<number> = new Map();

  constructor(ctx: AppContext) {
    this.ctx = ctx;
    this.store = ctx.store;
  }

  /** Reads the reservations (at start, and when the database was loaded again). */
  async load(): Promise<void> {
    const epoch = this.store.epoch;
    const rows = await this.store.query.selectFrom("lab_reservations").select(["device_id", "until"]).execute();
    this.held = new Map(rows.map((r) => [r.device_id, Date.parse(r.until)]));
    this.epoch = epoch;
  }

  /** Whether someone holds `deviceId` at `now` (a deployment offers it nothing meanwhile). */
  holds(deviceId: number, now: number): boolean {
    if (this.epoch !== this.store.epoch) {
      // Reloaded from disk (a restore): the old contents answer until the new ones are read.
      this.epoch = this.store.epoch;
      void this.load().catch((error: Error) => this.ctx.log.warn(`lab: reservations not read again: ${error.message}`));
    }
    return (this.held.get(deviceId) ?? 0) > now;
  }

  /**
   * Resolves true once no one holds `deviceId` (at once when no one does): at its `until`, or
   * earlier when it is released or broken, later when its holder refreshes it. False when
   * `signal` ended the wait first.
   */
  async untilFree(deviceId: number, signal: AbortSignal): Promise<boolean> {
    for (;;) {
      if (signal.aborted) return false;
      const now = this.ctx.clock.now();
      if (!this.holds(deviceId, now)) return true;
      await sleepUntilWoken(this.ctx.clock, this.held.get(deviceId)! - now, signal, this.waiters, deviceId);
    }
  }

  /** The devices `identity` may read that someone holds now (the console's device list), by device id. */
  async list(identity: Identity, now: number): Promise<ReservationView[]> {
    const rows = await this.store.query.selectFrom("lab_reservations").select(["device_id", ...COLUMNS]).where("until", ">", isoTime(now)).orderBy("device_id").execute();
    // Boards are few: each is checked as the device's own page would be.
    const readable = await Promise.all(rows.map((r) => allowed(this.ctx.store.query, identity, "device", r.device_id, "read")));
    return rows.filter((_, i) => readable[i]).map(({ device_id, ...r }) => view(device_id, r));
  }

  /** Who holds a device now: `read` on it. */
  async view(identity: Identity, id: number, now: number): Promise<ReservationView> {
    await authorize(this.ctx.store.query, identity, "device", id, "read");
    if (!(await getDevice(this.ctx.store.query, id))) throw new LabgateError("not_found", "device does not exist");
    return view(id, await reservationOf(this.store.query, id, now));
  }

  /**
   * Reserves a device for the caller for `minutes` from `actor.at`, or refreshes the caller's own
   * reservation; needs `test` or `power` on it (someone who uses the board). Held by another: 409.
   */
  async reserve(identity: Identity, actor: Actor, id: number, minutes: number, note: string): Promise<ReservationView> {
    if (identity.kind !== "mgmt") throw new LabgateError("forbidden", MSG_FORBIDDEN);
    await authorize(this.ctx.store.query, identity, "device", id, "read");
    if (!(await allowed(this.ctx.store.query, identity, "device", id, "test")) && !(await allowed(this.ctx.store.query, identity, "device", id, "power"))) throw new LabgateError("forbidden", MSG_FORBIDDEN);
    const now = actor.at.getTime();
    const reservation = await this.store.transact(async (tx) => {
      const device = (await getDevice(tx, id));
      if (!device) throw new LabgateError("not_found", "device does not exist");
      const current = await reservationOf(tx, id, now);
      if (current && current.holder !== identity.user) throw new LabgateError("conflict", `device '${device.name || device.mac_address}' is reserved by ${current.holder} until ${current.until}`);
      const next: Reservation = { holder: identity.user, note, since: current?.since ?? isoTime(now), until: isoTime(now + minutes * 60_000) };
      await tx
        .insertInto("lab_reservations")
        .values({ device_id: id, ...next })
        .onConflict((oc) => oc.column("device_id").doUpdateSet(next))
        .execute();
      await recordAudit(tx, actor, current ? "reservation.refresh" : "reservation.create", `device:${id}`, { until: next.until, note });
      return next;
    });
    this.held.set(id, Date.parse(reservation.until));
    wakeAll(this.waiters, id);
    return view(id, reservation);
  }

  /** Releases the caller's reservation; an administrator (svc_admin_rw) breaks another's. Not reserved: a no-op. */
  async release(identity: Identity, actor: Actor, id: number): Promise<ReservationView> {
    await authorize(this.ctx.store.query, identity, "device", id, "read");
    const user = identity.kind === "mgmt" ? identity.user : undefined;
    await this.store.transact(async (tx) => {
      if (!(await getDevice(tx, id))) throw new LabgateError("not_found", "device does not exist");
      const current = await reservationOf(tx, id, actor.at.getTime());
      if (!current) return;
      const breaking = current.holder !== user;
      if (breaking && !bypasses(identity, "delete")) throw new LabgateError("forbidden", `the reservation is ${current.holder}'s: only its holder or an administrator may end it`);
      await tx.deleteFrom("lab_reservations").where("device_id", "=", id).execute();
      await recordAudit(tx, actor, breaking ? "reservation.break" : "reservation.release", `device:${id}`, breaking ? { holder: current.holder, until: current.until } : undefined);
    });
    this.held.delete(id);
    wakeAll(this.waiters, id);
    return view(id, undefined);
  }
}
