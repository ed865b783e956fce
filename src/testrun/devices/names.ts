/*
 * How a config entry (`machines:`) or a trigger (`machine_target`) names managed devices. The
 * messages between the gateway and the devices' agents: src/protocol/labgate/device.ts.
 */

/** Where a config entry (`machines:`) or a trigger (`machine_target`) names managed devices. */
export const DEVICE_TARGET = /^(device|group|tag):(.+)$/;
export const isDeviceTarget = (name: string): boolean => DEVICE_TARGET.test(name);
