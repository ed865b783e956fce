import { LabgateError } from "../../util/errors.ts";
import { DeviceGoneError, DeviceTimeoutError } from "./hub.ts";

/** Device-side failures as LabgateErrors: a silent device is a timeout, one that went away too. */
export function deviceFailure(error: unknown): Error {
  if (error instanceof DeviceTimeoutError) return new LabgateError("timeout", error.message);
  if (error instanceof DeviceGoneError) return new LabgateError("timeout", `${error.message} before answering`);
  return error as Error;
}

export const notConnected = (): LabgateError => new LabgateError("conflict", "device is not connected");
