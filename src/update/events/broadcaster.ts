import { Broadcaster } from "../../http/sse.ts";

/** The live device events (connect, disconnect, update), and the deployments' (docs/update-server.md, "Deployments"). */
export type DeviceEventName = "connect" | "disconnect" | "update";
export type DeploymentEventName = "deployment" | "deployment_device";
export type EventName = DeviceEventName | DeploymentEventName;
export type DeviceEvent =
  /** `{"device": mac, ...}`: every device event names the device by MAC. */
  | { event: DeviceEventName; data: { device: string } & Record<string, unknown> }
  /** `{"deployment": id, "group": id, ...}`: shown to whoever may read the group. */
  | { event: DeploymentEventName; data: { deployment: number; group: number } & Record<string, unknown> };

/** In-process publish/subscribe (the reference needs Redis for this; one process needs nothing). */
export class EventBroadcaster extends Broadcaster<DeviceEvent> {
  publish(event: DeviceEventName, data: { device: string } & Record<string, unknown>): void {
    this.emit({ event, data });
  }

  publishDeployment(event: DeploymentEventName, data: { deployment: number; group: number } & Record<string, unknown>): void {
    this.emit({ event, data });
  }
}
