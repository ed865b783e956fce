import { HttpError, httpError } from "../../http/errors.ts";
import { DeviceGoneError, DeviceTimeoutError } from "./hub.ts";

/** Device-side failures as HTTP errors: a silent device is a 504, one that went away too. */
export function asHttpError(error: unknown): Error {
  if (error instanceof HttpError) return error;
  if (error instanceof DeviceTimeoutError) return httpError(504, error.message);
  if (error instanceof DeviceGoneError) return httpError(504, `${error.message} before answering`);
  return error as Error;
}

export const notConnected = (): HttpError => httpError(409, "device is not connected");
