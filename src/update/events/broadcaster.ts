import { perServer } from "../../server/context.ts";

/** The live events of update-server.md 15.1. */
export type EventName = "connect" | "disconnect" | "update";
export interface DeviceEvent {
  event: EventName;
  /** `{"device": mac, ...}`: every event names the device by MAC. */
  data: { device: string } & Record<string, unknown>;
}

type Listener = (event: DeviceEvent) => void;

/** In-process publish/subscribe (the reference needs Redis for this; one process needs nothing). */
export class EventBroadcaster {
  private readonly listeners = new Set<Listener>();

  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  publish(event: EventName, data: DeviceEvent["data"]): void {
    for (const listener of this.listeners) {
      try {
        listener({ event, data });
      } catch {
        // One broken subscriber must not stop the others (or the publisher).
      }
    }
  }

  get subscribers(): number {
    return this.listeners.size;
  }
}

/** The broadcaster of a running server. */
export const eventsOf = perServer(() => new EventBroadcaster());
