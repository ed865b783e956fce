import { LabgateError } from "../util/errors.ts";

/** A positive integer path id; anything else (or too large) is answered like a missing object. */
export function pathId(text: string | undefined, what: string): number {
  const id = Number(text);
  if (!text || !/^\d+$/.test(text) || !Number.isSafeInteger(id) || id < 1) throw new LabgateError("not_found", `${what} does not exist`);
  return id;
}
