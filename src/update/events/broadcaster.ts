import { Broadcaster } from "../../util/broadcaster.ts";
import type { StreamEventData } from "../../protocol/streams.ts";

/** The live device events (connect, disconnect, update, version), and the deployments' (docs/update-server.md, "Live events"). */
export type DeviceEventName = "connect" | "disconnect" | "update" | "version";
export type DeploymentEventName = "deployment" | "deployment_device";
export type EventName = DeviceEventName | DeploymentEventName;
/**
 * An event and its data: a device event names the device by MAC; a deployment's is shown to
 * whoever may read its group. Data may carry more than its schema says (deployment_device's extras).
 */
export type DeviceEvent = { [N in EventName]: { event: N; data: StreamEventData[N] & Record<string, unknown> } }[EventName];

/** In-process publish/subscribe (the reference needs Redis for this; one process needs nothing). */
export class EventBroadcaster extends Broadcaster<DeviceEvent> {
  private readonly relay: (event: DeviceEvent) => void;

  /** `relay`: where this node's events go to the other nodes of a cluster (nowhere on one node). */
  constructor(relay: (event: DeviceEvent) => void = () => {}) {
    super();
    this.relay = relay;
  }

  publish<N extends DeviceEventName>(event: N, data: StreamEventData[N] & Record<string, unknown>): void {
    this.emitHere({ event, data } as DeviceEvent);
  }

  publishDeployment<N extends DeploymentEventName>(event: N, data: StreamEventData[N] & Record<string, unknown>): void {
    this.emitHere({ event, data } as DeviceEvent);
  }

  /** An event another node published: to this node's streams only. */
  received(event: DeviceEvent): void {
    if (typeof event?.event === "string" && event.data && typeof event.data === "object") this.emit(event);
  }

  private emitHere(event: DeviceEvent): void {
    this.emit(event);
    this.relay(event);
  }
}
