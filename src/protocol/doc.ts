/*
 * docs/device-protocol.md, written from the message schemas (./labgate/device.ts) into the prose of
 * ./labgate/guide.md: `{{server-messages}}` and `{{device-messages}}` become each direction's
 * table, `{{message-fields}}` every message's fields. test/foundation/protocol-doc.test.ts checks
 * the committed file; `npm run protocol-doc` rewrites it.
 */
import * as z from "zod/mini";
import { messages } from "./labgate/device.ts";

type Json = {
  type?: string | string[];
  const?: unknown;
  enum?: unknown[];
  anyOf?: Json[];
  items?: Json;
  properties?: Record<string, Json>;
  additionalProperties?: Json | boolean;
  required?: string[];
  description?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  exclusiveMinimum?: number;
};
type Messages = ReturnType<typeof messages>;
type MessageSchema = Messages["DEVICE_MESSAGES"][number] | Messages["SERVER_MESSAGES"][number];

/** Bounds beyond what JavaScript's safe integers imply anyway. */
function bounds(s: Json): string {
  const out: string[] = [];
  if (s.minLength !== undefined && s.maxLength !== undefined) out.push(`${s.minLength} to ${s.maxLength} characters`);
  if (s.exclusiveMinimum === 0) out.push("> 0");
  if (s.minimum === 0) out.push(">= 0");
  return out.length ? ` (${out.join(", ")})` : "";
}

/** A field's type in a few words: `string`, `integer (> 0)`, `[string]`, `{string: string}`, `"a" \| "b"`. */
function typeOf(s: Json): string {
  if (s.anyOf) return s.anyOf.map(typeOf).join(" or ");
  if (s.enum) return s.enum.map((v) => `\`${JSON.stringify(v)}\``).join(", ");
  if (s.const !== undefined) return `\`${JSON.stringify(s.const)}\``;
  if (Array.isArray(s.type)) return s.type.join(" or ");
  if (s.type === "array") return `[${s.items ? typeOf(s.items) : "any"}]`;
  if (s.type === "object") {
    if (s.properties) return `{${Object.keys(s.properties).join(", ")}}`;
    const values = typeof s.additionalProperties === "object" && s.additionalProperties.type ? typeOf(s.additionalProperties) : "any";
    return `{string: ${values}}`;
  }
  return `${s.type ?? "any"}${bounds(s)}`;
}

const cell = (text: string) => text.replaceAll("|", "\\|").replaceAll("\n", " ");
const jsonOf = (schema: MessageSchema): Json => z.toJSONSchema(schema, { io: "input" }) as Json;
const methodOf = (schema: MessageSchema): string => schema.def.shape.method.def.values[0];
const fieldsOf = (json: Json) => Object.entries(json.properties ?? {}).filter(([name]) => name !== "method");

/** One direction's table: method, fields (optional ones in brackets), what the receiver does. */
function table(schemas: readonly MessageSchema[], receiver: string): string {
  const rows = schemas.map((schema) => {
    const json = jsonOf(schema);
    const required = new Set(json.required ?? []);
    const fields = fieldsOf(json).map(([name]) => (required.has(name) ? `\`${name}\`` : `[\`${name}\`]`));
    return `| \`${methodOf(schema)}\` | ${fields.join(", ")} | ${cell(json.description ?? "")} |`;
  });
  return [`| method | fields | what the ${receiver} does |`, "| --- | --- | --- |", ...rows].join("\n");
}

/** Each message's fields: type, whether it must be there, what it says. */
function fields(direction: string, schemas: readonly MessageSchema[]): string {
  const parts = [`### ${direction}`];
  for (const schema of schemas) {
    const json = jsonOf(schema);
    const required = new Set(json.required ?? []);
    const list = fieldsOf(json);
    parts.push(`#### \`${methodOf(schema)}\``);
    if (list.length === 0) {
      parts.push("No fields.");
      continue;
    }
    parts.push(
      ["| field | type | required | what |", "| --- | --- | --- | --- |", ...list.map(([name, s]) => `| \`${name}\` | ${cell(typeOf(s))} | ${required.has(name) ? "yes" : "no"} | ${cell(s.description ?? (s.items?.description ?? ""))} |`)].join("\n"),
    );
  }
  return parts.join("\n\n");
}

/** The whole document, from `guide` (the prose with its placeholders). */
export function deviceProtocolDoc(guide: string): string {
  const { DEVICE_MESSAGES, SERVER_MESSAGES } = messages();
  const parts: Record<string, string> = {
    "server-messages": table(SERVER_MESSAGES, "device"),
    "device-messages": table(DEVICE_MESSAGES, "server"),
    "message-fields": [fields("Server to device", SERVER_MESSAGES), fields("Device to server", DEVICE_MESSAGES)].join("\n\n"),
  };
  return guide.replace(/\{\{([a-z-]+)\}\}/g, (whole, name: string) => {
    const part = parts[name];
    if (part === undefined) throw new Error(`guide.md: no part ${whole}`);
    return part;
  });
}
