/*
 * Board reservations: a user holds a device until a time (refreshable by its holder, released by
 * DELETE or by the time passing; an administrator may break it). While it is held, no one else's
 * test run goes to it (refuseReserved, called where a run's devices are resolved). A row past its
 * `until` holds nothing and is replaced by the next reservation.
 */
import { recordAudit, type Actor } from "../audit/audit.ts";
import type { Identity } from "../app/context.ts";
import { Database, type Tx } from "../db/index.ts";
import { getDevice } from "../update/devices/devices.ts";
import { bypasses, MSG_FORBIDDEN, permissionFilterSql } from "../update/permissions/permissions.ts";
import { allowedSync, authorizeSync } from "../update/permissions/legacy.ts";
import { LabgateError } from "../util/errors.ts";
import { isoTime } from "../util/time.ts";

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

/**
 * The devices that may hold a reservation, per database: every update check of a deployment's
 * device asks, so only these are looked up. A superset is enough (a row released, expired or
 * rolled back stays in it until the next start), so reserve() adds before it writes.
 */
const mayHold = new WeakMap<Database, Set<number>>();
function mayBeReserved(db: Database): Set<number> {
  let ids = mayHold.get(db);
  if (!ids) mayHold.set(db, (ids = new Set(db.all<{ device_id: number }>("SELECT device_id FROM lab_reservations").map((r) => r.device_id))));
  return ids;
}

/** The reservation holding `deviceId` at `now`, if any. */
export function reservationOf(db: Database | Tx, deviceId: number, now: number): Reservation | undefined {
  if (db instanceof Database && !mayBeReserved(db).has(deviceId)) return undefined;
  return db.get<Reservation>("SELECT holder, note, since, until FROM lab_reservations WHERE device_id = ? AND until > ?", [deviceId, isoTime(now)]);
}

/** A 409 naming every device of `devices` someone other than `identity`'s user holds at `now`. */
export function refuseReserved(db: Database, identity: Identity, devices: ReadonlyArray<{ id: number; name: string }>, now: number): void {
  const user = identity.kind === "mgmt" ? identity.user : undefined;
  const unique = [...new Map(devices.map((d) => [d.id, d])).values()];
  const held = unique.flatMap((d) => {
    const r = reservationOf(db, d.id, now);
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
  private readonly db: Database;
  constructor(db: Database) {
    this.db = db;
  }

  /** The devices `identity` may read that someone holds now (the console's device list), by device id. */
  list(identity: Identity, now: number): ReservationView[] {
    const filter = permissionFilterSql(identity, "device", "d");
    const rows = this.db.all<Reservation & { device_id: number }>(
      `SELECT r.device_id, r.holder, r.note, r.since, r.until FROM lab_reservations r JOIN devices d ON d.id = r.device_id
         WHERE r.until > ?${filter ? ` AND (${filter.sql})` : ""} ORDER BY r.device_id`,
      [isoTime(now), ...(filter?.params ?? [])],
    );
    return rows.map(({ device_id, ...r }) => view(device_id, r));
  }

  /** Who holds a device now: `read` on it. */
  view(identity: Identity, id: number, now: number): ReservationView {
    authorizeSync(this.db, identity, "device", id, "read");
    if (!getDevice(this.db, id)) throw new LabgateError("not_found", "device does not exist");
    return view(id, reservationOf(this.db, id, now));
  }

  /**
   * Reserves a device for the caller for `minutes` from `actor.at`, or refreshes the caller's own
   * reservation; needs `test` or `power` on it (someone who uses the board). Held by another: 409.
   */
  async reserve(identity: Identity, actor: Actor, id: number, minutes: number, note: string): Promise<ReservationView> {
    if (identity.kind !== "mgmt") throw new LabgateError("forbidden", MSG_FORBIDDEN);
    authorizeSync(this.db, identity, "device", id, "read");
    if (!allowedSync(this.db, identity, "device", id, "test") && !allowedSync(this.db, identity, "device", id, "power")) throw new LabgateError("forbidden", MSG_FORBIDDEN);
    const now = actor.at.getTime();
    mayBeReserved(this.db).add(id);
    const reservation = await this.db.write((tx) => {
      const device = getDevice(tx, id);
      if (!device) throw new LabgateError("not_found", "device does not exist");
      const current = reservationOf(tx, id, now);
      if (current && current.holder !== identity.user) throw new LabgateError("conflict", `device '${device.name || device.mac_address}' is reserved by ${current.holder} until ${current.until}`);
      const next: Reservation = { holder: identity.user, note, since: current?.since ?? isoTime(now), until: isoTime(now + minutes * 60_000) };
      tx.run("INSERT OR REPLACE INTO lab_reservations (device_id, holder, note, since, until) VALUES (?, ?, ?, ?, ?)", [id, next.holder, next.note, next.since, next.until]);
      recordAudit(tx, actor, current ? "reservation.refresh" : "reservation.create", `device:${id}`, { until: next.until, note });
      return next;
    });
    return view(id, reservation);
  }

  /** Releases the caller's reservation; an administrator (svc_admin_rw) breaks another's. Not reserved: a no-op. */
  async release(identity: Identity, actor: Actor, id: number): Promise<ReservationView> {
    authorizeSync(this.db, identity, "device", id, "read");
    const user = identity.kind === "mgmt" ? identity.user : undefined;
    await this.db.write((tx) => {
      if (!getDevice(tx, id)) throw new LabgateError("not_found", "device does not exist");
      const current = reservationOf(tx, id, actor.at.getTime());
      if (!current) return;
      const breaking = current.holder !== user;
      if (breaking && !bypasses(identity, "delete")) throw new LabgateError("forbidden", `the reservation is ${current.holder}'s: only its holder or an administrator may end it`);
      tx.run("DELETE FROM lab_reservations WHERE device_id = ?", [id]);
      recordAudit(tx, actor, breaking ? "reservation.break" : "reservation.release", `device:${id}`, breaking ? { holder: current.holder, until: current.until } : undefined);
    });
    return view(id, undefined);
  }
}
