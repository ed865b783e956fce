import type { Database } from "../../db/index.ts";

/**
 * Which devices hold an open management connection on this server (the `connected` field).
 * Kept per database so that several servers in one process (tests) do not share it. The
 * WebSocket code (device actions) calls setConnected on open and close.
 */
const registries = new WeakMap<Database, Set<string>>();

function registry(db: Database): Set<string> {
  let macs = registries.get(db);
  if (!macs) registries.set(db, (macs = new Set()));
  return macs;
}

export const isConnected = (db: Database, mac: string): boolean => registries.get(db)?.has(mac) ?? false;

export function setConnected(db: Database, mac: string, connected: boolean): void {
  if (connected) registry(db).add(mac);
  else registry(db).delete(mac);
}
