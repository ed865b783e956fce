/*
 * One text frame of the management socket in and out: parsed against the schema of its method
 * (./device.ts), so that a handler only ever sees a well-formed message.
 */
import type * as z from "zod/mini";
import { messages, type DeviceMessage, type ServerMessage } from "./device.ts";

/** A frame read: the message, or why it is dropped (a method only once the frame named one). */
export type Read<T> = { message: T } | { dropped: "unparsable" } | { dropped: "unknown"; method: string } | { dropped: "malformed"; method: string; problem: string };

type Messages = ReturnType<typeof messages>;
type MessageSchema = Messages["DEVICE_MESSAGES"][number] | Messages["SERVER_MESSAGES"][number];

const methodOf = (schema: MessageSchema): string => schema.def.shape.method.def.values[0];

/** The first issue as a short sentence (`field "state": ...`). */
function problemOf(error: z.core.$ZodError): string {
  const issue = error.issues[0];
  if (!issue) return "malformed";
  return issue.path.length > 0 ? `field "${issue.path.join(".")}": ${issue.message}` : issue.message;
}

/** A reader of the messages `schemas` lists, which it takes on its first frame. */
function reader<T>(schemas: () => readonly MessageSchema[]): (text: string) => Read<T> {
  let byMethod: Map<string, MessageSchema> | undefined;
  return (text) => {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return { dropped: "unparsable" };
    }
    const method = value && typeof value === "object" && !Array.isArray(value) ? (value as { method?: unknown }).method : undefined;
    if (typeof method !== "string") return { dropped: "unparsable" };
    byMethod ??= new Map(schemas().map((schema) => [methodOf(schema), schema]));
    const schema = byMethod.get(method);
    if (!schema) return { dropped: "unknown", method };
    const result = schema.safeParse(value);
    return result.success ? { message: result.data as T } : { dropped: "malformed", method, problem: problemOf(result.error) };
  };
}

/** A frame from a device (the server's side). */
export const readDeviceMessage = reader<DeviceMessage>(() => messages().DEVICE_MESSAGES);
/** A frame from the server (the device's side). */
export const readServerMessage = reader<ServerMessage>(() => messages().SERVER_MESSAGES);

/** A WebSocket close reason: at most 123 bytes of UTF-8 (a longer one makes `close` throw). */
export function closeReason(text: string): string {
  let reason = text;
  while (Buffer.byteLength(reason) > 123) reason = reason.slice(0, -1);
  return reason;
}
