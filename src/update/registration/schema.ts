/**
 * The shapes of device authorization and registrations, each once: registration/routes.ts
 * registers them with the routes (the OpenAPI document shows them), the handlers parse and answer
 * with them, the console imports the types.
 */
import * as z from "zod";
import { flagParam, integerParam, readFlag, Rfc822, strictBody, zFlag, zInteger, zRequiredString } from "../../util/shapes.ts";
import { DeviceMetadata } from "../devices/schema.ts";
import { deviceMetadata } from "../devices/metadata.ts";

const PUBLIC_KEY_ERROR = "schema validation failed: public_key must be a non-empty string";
const authBodies = new Map<string, ReturnType<typeof makeAuthBody>>();
const makeAuthBody = (prefix: string) =>
  strictBody({
    metadata: deviceMetadata(prefix),
    public_key: z.string({ error: PUBLIC_KEY_ERROR }).min(1, { error: PUBLIC_KEY_ERROR }).describe("PEM"),
    timestamp: zInteger(-Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, "schema validation failed: timestamp must be an integer (UNIX seconds)").describe("UNIX seconds"),
  });
/** The body of POST /api/v1/auth/device, signed as sent (docs/device-protocol.md); one schema per prefix. */
export const deviceAuthBody = (prefix: string) => authBodies.get(prefix) ?? authBodies.set(prefix, makeAuthBody(prefix)).get(prefix)!;
/** The fields of a signed device authorization request, as the schema gives them. */
export type DeviceAuthFields = z.output<ReturnType<typeof deviceAuthBody>>;

/** What an accepted device gets. */
export const DeviceToken = z.object({ token: z.string(), expires: z.int().describe("UNIX seconds") });
export type DeviceToken = z.infer<typeof DeviceToken>;

/** A pending registration: a device that asked with a key no device has yet. */
export const PendingRegistration = z
  .object({
    mac_address: z.string(),
    public_key: z.string(),
    metadata: DeviceMetadata,
    last_appeared: Rfc822,
    key_fingerprint: z.string().describe("with details=true: SHA-256 of the key (SPKI DER), hex"),
    key_change: z.boolean().describe("with details=true: approving it replaces the key of an existing device"),
    device_id: z.int().nullable().describe("with details=true: that device, else null"),
    device_key_fingerprint: z.string().nullable().describe("with details=true: that device's current key fingerprint, else null"),
    protocol: z.enum(["labgate", "mender"]).describe("with details=true: the device protocol it asked with"),
    identity: z.record(z.string(), z.unknown()).nullable().describe("with details=true: a Mender device's identity data (its id_data), else null"),
  })
  .meta({ id: "PendingRegistration" });
export type PendingRegistration = z.infer<typeof PendingRegistration>;

/** A pending registration with exactly the reference's fields (its clients load the list with a strict schema). */
export const ReferencePending = PendingRegistration.pick({ mac_address: true, public_key: true, metadata: true, last_appeared: true });
export type ReferencePending = z.infer<typeof ReferencePending>;

/** Paging of the pending list; without either the answer is the whole list. */
export const PendingListQuery = z.object({
  limit: integerParam("limit", 1, 1000).describe("at most this many registrations, in the order they first asked (with X-Total-Count: how many are pending)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many"),
  details: flagParam("details").describe("true: add labgate's key_fingerprint, key_change, device_id and device_key_fingerprint to each (the reference's clients read exactly its four fields)"),
});

/** A pending registration named by its MAC address and key (DELETE /api/v1/auth/pending). */
export const PendingKey = strictBody({ mac_address: zRequiredString("mac_address", 64), public_key: zRequiredString("public_key") });

/** POST /api/v1/auth/register: approve a pending registration. */
export const Register = PendingKey.extend({
  confirm_key_change: zFlag('schema validation failed: field "confirm_key_change" must be true or false').nullish(),
});

/** Registrations approved in one request at most. */
export const BULK_APPROVE_MAX = 200;

/** POST /api/v1/auth/register/bulk: approve these pending registrations, each as POST /api/v1/auth/register would. */
export const RegisterBulk = strictBody({
  registrations: z
    .array(Register, { error: 'schema validation failed: field "registrations" must be a list of {mac_address, public_key}' })
    .min(1, { error: 'schema validation failed: field "registrations" must name at least one registration' })
    .max(BULK_APPROVE_MAX, { error: `schema validation failed: at most ${BULK_APPROVE_MAX} registrations at once` }),
});

/** What a bulk approval did, one result per registration in the order given. */
export const RegisterBulkResult = z.object({
  approved: z.int(),
  results: z.array(z.object({ mac_address: z.string(), device_id: z.int().nullable(), error: z.string().nullable().describe("why this one was not approved") })),
});
export type RegisterBulkResult = z.infer<typeof RegisterBulkResult>;

/** POST /api/v1/auth/pending/remove: which pending registrations to drop (all conditions hold). */
export const PendingRemove = strictBody({
  all: z.preprocess(readFlag, z.literal(true, { error: 'schema validation failed: field "all" must be true' })).optional(),
  client_address: z.string({ error: 'schema validation failed: field "client_address" must be a string' }).max(64).optional(),
  older_than: zInteger(0, 10 * 365 * 86400, 'schema validation failed: field "older_than" must be an integer (seconds)').optional(),
});

/** How many pending registrations a bulk removal dropped. */
export const PendingRemoved = z.object({ removed: z.int() });
export type PendingRemoved = z.infer<typeof PendingRemoved>;
