import { Broadcaster } from "../../http/sse.ts";

/** The live events of update-server.md 15.1. */
export type EventName = "connect" | "disconnect" | "update";
export interface DeviceEvent {
  event: EventName;
  /** `{"device": mac, ...}`: every event names the device by MAC. */
  data: { device: string } & Record<string, unknown>;
}

/** In-process publish/subscribe (the reference needs Redis for this; one process needs nothing). */
export class EventBroadcaster extends Broadcaster<DeviceEvent> {
  publish(event: EventName, data: DeviceEvent["data"]): void {
    this.emit({ event, data });
  }
}
