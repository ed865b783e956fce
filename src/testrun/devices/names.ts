/*
 * How a config entry (`machines:`) or a trigger (`machine_target`) names managed devices, and how
 * a run's error and warnings name them. The messages between the gateway and the devices' agents:
 * src/protocol/labgate/device.ts.
 */
import type { DeviceProgress } from "../schema.ts";

/** Where a config entry (`machines:`) or a trigger (`machine_target`) names managed devices. */
export const DEVICE_TARGET = /^(device|group|tag):(.+)$/;
export const isDeviceTarget = (name: string): boolean => DEVICE_TARGET.test(name);

/** How a device is named in its run's error and warnings. */
export const deviceLabel = (name: string): string => `device '${name}': `;

/** A run's error when shares failed for their own reasons: each such device and why. */
export const deviceErrors = (devices: DeviceProgress[]): string =>
  devices
    .filter((d) => d.error && d.status === "failed")
    .map((d) => `${deviceLabel(d.name)}${d.error}`)
    .join("; ");
