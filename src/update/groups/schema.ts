/**
 * The groups API's shapes, each once: groups/routes.ts registers them with the routes (the
 * OpenAPI document shows them), the handlers parse and answer with them, the console imports the types.
 */
import * as z from "zod";
import { AnyObject, jsonObject, Rfc822, strictBody, zId, zInteger } from "../../util/shapes.ts";

/** A group as the v1 routes show it. */
export const GroupV1 = z
  .object({
    id: z.int(),
    created: Rfc822,
    packages: z.array(z.int()),
    devices: z.array(z.int()),
    metadata: AnyObject,
    policy: z.string().describe("the update policy (docs/update-server.md, \"Update policies\")"),
  })
  .meta({ id: "GroupV1" });
export type GroupV1 = z.infer<typeof GroupV1>;

/** A group (v2): with its priority (a device in several groups follows the highest). */
export const Group = GroupV1.extend({ priority: z.int() }).meta({ id: "GroupV2" });
export type Group = z.infer<typeof Group>;

const PRIORITY_LIMIT = 2 ** 31 - 1;

/** A priority: an integer within 32 bits (or its decimal text, as the reference reads it). */
const priority = (required: boolean) => {
  const message = 'schema validation failed: "priority" must be an integer';
  return zInteger(-PRIORITY_LIMIT, PRIORITY_LIMIT, (input) => (required && input === undefined ? 'schema validation failed: field "priority" is required' : message));
};

/** A required array of positive integer ids, each a number or its decimal text (duplicates collapse). */
const idList = (key: string) => {
  const message = `schema validation failed: field "${key}" must be an array of positive integer ids`;
  return z
    .array(zId(message), {
      error: (iss) => (iss.input === undefined ? `schema validation failed: field "${key}" is required` : message),
    })
    .transform((ids) => [...new Set(ids)]);
};

const metadataObject = z.record(z.string(), z.unknown(), {
  error: (iss) => (iss.input === undefined ? 'schema validation failed: field "metadata" is required' : 'schema validation failed: field "metadata" must be an object'),
});

/** POST /api/v1/groups: the body is the group's metadata itself. */
export const GroupCreateV1 = metadataObject;
/** POST /api/v2/groups. */
export const GroupCreate = z.looseObject({ metadata: metadataObject, priority: priority(false).nullish() }, jsonObject);
/** PATCH .../groups/{id}/devices: devices to add and to remove. */
export const GroupDevices = strictBody({ add: idList("add"), remove: idList("remove") });
/** Devices one "add all matching" may add at most. */
export const GROUP_MATCH_MAX = 1000;
/** POST /api/v2/groups/{id}/devices/matching: add every device the filter matches (the device list's `q`). */
export const GroupDevicesMatching = strictBody({
  q: z
    .string({ error: 'schema validation failed: field "q" must be a string' })
    .trim()
    .min(1, { error: 'schema validation failed: field "q" must not be empty (it would match every device)' })
    .max(256, { error: 'schema validation failed: field "q" must be at most 256 characters' })
    .describe("the device list's filter: text within the name, MAC address, id, version or device type"),
});
export const GroupDevicesAdded = z.object({ added: z.int().describe("devices that joined (those already members are left as they are)") });
export type GroupDevicesAdded = z.infer<typeof GroupDevicesAdded>;
/** POST .../groups/{id}/package: the group's packages, replacing the list. */
export const GroupPackages = strictBody({ packages: idList("packages") });
/** POST .../groups/{id}/policy. */
export const GroupPolicy = strictBody({
  policy: z
    .string({ error: 'schema validation failed: field "policy" must be a string' })
    .max(4096, { error: "invalid policy: longer than 4096 characters" })
    .describe("e.g. exact_match,v2 or no_update"),
});
/** POST /api/v2/groups/{id}/priority. */
export const GroupPriority = strictBody({ priority: priority(true) });
