/**
 * Live device state from the server-sent events of /api/stream (the session cookie authenticates
 * it): connect, disconnect and update (progress) events, merged into one store that pages read
 * with useLive(). One EventSource while signed in; it reconnects by itself.
 */
import { useEffect, useState } from "preact/hooks";
import { get } from "./api.ts";

export interface LiveProgress {
  progress: number;
  version: string;
}

export interface LiveState {
  /** MAC -> connected, for devices with an event since the page loaded (else the list's `connected`). */
  online: Map<string, boolean>;
  /** MAC -> update progress (from /api/v2/devices/progress, then events). */
  progress: Map<string, LiveProgress>;
  /** Is the event stream open. */
  streaming: boolean;
}

let state: LiveState = { online: new Map(), progress: new Map(), streaming: false };
const listeners = new Set<(s: LiveState) => void>();
let scheduled = false;
const changed = () => {
  if (scheduled) return;
  scheduled = true;
  // Many events at once (a lab reconnecting) render once per frame.
  requestAnimationFrame(() => {
    scheduled = false;
    state = { ...state };
    for (const l of listeners) l(state);
  });
};

let source: EventSource | undefined;

export function startLive() {
  if (source) return;
  source = new EventSource("/api/stream");
  source.onopen = () => {
    state.streaming = true;
    changed();
    // What was updating before the stream opened.
    get<Array<{ mac_address: string; progress: number; version: string }>>("/api/v2/devices/progress").then(
      (list) => {
        for (const p of list) if (!state.progress.has(p.mac_address)) state.progress.set(p.mac_address, { progress: p.progress, version: p.version });
        changed();
      },
      () => {},
    );
  };
  source.onerror = () => {
    state.streaming = false;
    changed();
  };
  const on = (name: string, handle: (data: Record<string, unknown>) => void) =>
    source!.addEventListener(name, (e) => {
      try {
        handle(JSON.parse((e as MessageEvent).data));
        changed();
      } catch {
        // A malformed event changes nothing.
      }
    });
  on("connect", (d) => state.online.set(String(d.device), true));
  on("disconnect", (d) => state.online.set(String(d.device), false));
  on("update", (d) => state.progress.set(String(d.device), { progress: Number(d.progress), version: String(d.version ?? "") }));
}

export function stopLive() {
  source?.close();
  source = undefined;
  state = { online: new Map(), progress: new Map(), streaming: false };
}

/** The live state; the component re-renders when it changes. */
export function useLive(): LiveState {
  const [current, setCurrent] = useState(state);
  useEffect(() => {
    listeners.add(setCurrent);
    setCurrent(state);
    return () => void listeners.delete(setCurrent);
  }, []);
  return current;
}

/** Online: the last event if there was one, else what the server said when the row was loaded. */
export const isOnline = (live: LiveState, mac: string, loaded: boolean | undefined): boolean => live.online.get(mac) ?? Boolean(loaded);
