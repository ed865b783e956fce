/**
 * The permissions API's shapes, each once: permissions/routes.ts registers them with the routes
 * (the OpenAPI document shows them), the handlers parse and answer with them, the console imports the types.
 */
import * as z from "zod";
import { flagParam, readInteger, Rfc822, strictBody } from "../../util/shapes.ts";

/** What a permission is on; device_by_tag names devices by tag, name or MAC address (docs/update-server.md, "Permissions"). */
export const RESOURCES = ["package", "group", "device", "device_by_tag"] as const;
export type PermissionResource = (typeof RESOURCES)[number];

/** What a permission lets its holder do. */
export const PERMISSIONS = ["read", "update", "delete", "shell", "test", "power"] as const;
export type Permission = (typeof PERMISSIONS)[number];

/** A permission: `user_id` may do `permission` on a resource given by id (or, for device_by_tag, by name). */
export const PermissionObject = z
  .object({
    id: z.int(),
    created: Rfc822,
    resource: z.enum(RESOURCES),
    resource_id: z.int().nullable(),
    resource_name: z.string().nullable(),
    user_id: z.string(),
    permission: z.enum(PERMISSIONS),
  })
  .meta({ id: "Permission" });
export type PermissionObject = z.infer<typeof PermissionObject>;

/** GET /api/v1/permissions?names=true: each permission also names what it is on. */
export const PermissionListQuery = z.object({
  names: flagParam("names").describe("true: add resource_label, the present name of the device, group or package (the reference's clients read exactly its fields)"),
});
export const NamedPermission = PermissionObject.extend({ resource_label: z.string().nullable().describe("with names=true: the resource's present name; null when it has none") }).meta({
  id: "NamedPermission",
});
export type NamedPermission = z.infer<typeof NamedPermission>;

const positiveOrNull = (id: unknown): number | null => (typeof id === "number" && id !== 0 ? id : null);

const required = (key: string) =>
  z
    .string({ error: `schema validation failed: field "${key}" is required (a non-empty string)` })
    .min(1, { error: `schema validation failed: field "${key}" is required (a non-empty string)` });

/**
 * The body of POST /api/v1/permissions: required strings, known resource
 * and permission words, a positive resource_id or a resource_name (0, "" and null count as
 * missing, as in the reference; an id may come as its decimal text, as the reference reads it). `id` and `created` are accepted and ignored. The checks run in
 * the order the hand-written ones did, so the first failure names the same field.
 */
export const PermissionCreate = strictBody({
  // Words and lengths are checked below, after every required field, as the hand-written checks did;
  // the document shows them.
  resource: required("resource").meta({ enum: [...RESOURCES] }),
  user_id: required("user_id").meta({ maxLength: 256 }),
  permission: required("permission").meta({ enum: [...PERMISSIONS] }),
  resource_id: z.unknown().optional().meta({ type: ["integer", "string", "null"], minimum: 0 }),
  resource_name: z.unknown().optional().meta({ type: ["string", "null"], maxLength: 256 }),
  id: z.unknown().optional(),
  created: z.unknown().optional(),
}).superRefine((body, ctx) => {
  const fail = (why: string) => ctx.addIssue({ code: "custom", message: `schema validation failed: ${why}` });
  const { resource, permission, resource_name: rawName } = body;
  const rawId = readInteger(body.resource_id);
  if (body.user_id.length > 256) return fail(`field "user_id" is longer than 256 characters`);
  if (!(RESOURCES as readonly string[]).includes(resource)) return fail(`unknown resource "${resource}" (expected one of ${RESOURCES.join(", ")})`);
  if (!(PERMISSIONS as readonly string[]).includes(permission)) return fail(`unknown permission "${permission}" (expected one of ${PERMISSIONS.join(", ")})`);
  const hasId = rawId !== undefined && rawId !== null && rawId !== 0;
  const hasName = rawName !== undefined && rawName !== null && rawName !== "";
  if (hasId && (typeof rawId !== "number" || !Number.isSafeInteger(rawId) || rawId < 1)) return fail(`field "resource_id" must be a positive integer`);
  if (hasName && (typeof rawName !== "string" || rawName.length > 256)) return fail(`field "resource_name" must be a string of at most 256 characters`);
  if (!hasId && !hasName) return fail(`one of "resource_id" or "resource_name" is required`);
  })
  .transform(
    (b) => ({
      user_id: b.user_id,
      resource: b.resource as PermissionResource,
      permission: b.permission as Permission,
      resource_id: positiveOrNull(readInteger(b.resource_id)),
      resource_name: typeof b.resource_name === "string" && b.resource_name !== "" ? b.resource_name : null,
    }),
  );

/** A permission to grant, as the body's schema leaves it. */
export type NewPermission = z.output<typeof PermissionCreate>;
