/**
 * Live device state from the server-sent events of /api/stream: connect, disconnect, update
 * (progress) and version events. The frame opens the one stream while signed in
 * (`useLiveStream`, through `useEventSource`) and hands its state down (`LiveContext`); pages
 * read it with `useLive()`.
 */
import { createContext } from "preact";
import { useContext, useRef, useState } from "preact/hooks";
import { api } from "./api.ts";
import { useEventSource } from "./ui.tsx";
import type { StreamEventData } from "../../protocol/streams.ts";

export interface LiveProgress {
  progress: number;
  version: string;
}

export interface LiveState {
  /** MAC -> connected, for devices with an event since the page loaded (else the list's `connected`). */
  online: Map<string, boolean>;
  /** MAC -> update progress (from /api/v2/devices/progress, then events). */
  progress: Map<string, LiveProgress>;
  /** MAC -> the version the device reported it runs, since the page loaded (stored before the event). */
  versions: Map<string, string>;
  /** Is the event stream open. */
  streaming: boolean;
  /**
   * How many times the stream has opened. What changed while it was closed came as no event:
   * each opening starts the maps afresh, and pages showing `online` load their rows again (a
   * dependency of their `useLoad`).
   */
  opened: number;
}

/** The events of /api/stream the console follows: each names the device by MAC. */
type DeviceEvents = Pick<StreamEventData, "connect" | "disconnect" | "update" | "version">;

export const LiveContext = createContext<LiveState>({ online: new Map(), progress: new Map(), versions: new Map(), streaming: false, opened: 0 });

/** Opens /api/stream for as long as the calling component is shown; its state for LiveContext. */
export function useLiveStream(): LiveState {
  const maps = useRef({ online: new Map<string, boolean>(), progress: new Map<string, LiveProgress>(), versions: new Map<string, string>() });
  const [opened, setOpened] = useState(0);
  const [, setFrame] = useState(0);
  const scheduled = useRef(false);
  const changed = () => {
    if (scheduled.current) return;
    scheduled.current = true;
    // Many events at once (a lab reconnecting) render once per frame.
    requestAnimationFrame(() => {
      scheduled.current = false;
      setFrame((n) => n + 1);
    });
  };
  const { online, progress, versions } = maps.current;
  const streaming = useEventSource<DeviceEvents>(
    "/api/stream",
    {
      connect: (d) => (online.set(String(d.device), true), changed()),
      disconnect: (d) => (online.set(String(d.device), false), changed()),
      update: (d) => (progress.set(String(d.device), { progress: Number(d.progress), version: String(d.version ?? "") }), changed()),
      version: (d) => (versions.set(String(d.device), String(d.version)), changed()),
    },
    // Events from before a gap may be stale; what was updating is asked (events since win).
    () => {
      online.clear();
      progress.clear();
      versions.clear();
      setOpened((n) => n + 1);
      api.get("/api/v2/devices/progress").then(
        (list) => {
          for (const p of list) if (!progress.has(p.mac_address)) progress.set(p.mac_address, { progress: p.progress, version: p.version });
          changed();
        },
        () => {},
      );
    },
  );
  // A new object each render: the context's readers render again with the maps as they are now.
  return { online, progress, versions, streaming, opened };
}

/** The live state; the component re-renders when it changes. */
export const useLive = (): LiveState => useContext(LiveContext);

/** Online: the last event if there was one, else what the server said when the row was loaded. */
export const isOnline = (live: LiveState, mac: string, loaded: boolean | undefined): boolean => live.online.get(mac) ?? Boolean(loaded);
