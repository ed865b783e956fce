/*
 * Mender's device API as mender-client 3.4 speaks it: the bodies it sends and the answers it
 * expects, one schema each; the routes (src/update/mender/) parse and answer with them. Unknown
 * fields are dropped, not refused: Mender's clients send more than a server reads.
 */
import * as z from "zod";

/** The statuses a client reports for a deployment (`PUT .../deployments/{id}/status`). */
export const DEPLOYMENT_STATUSES = [
  "downloading",
  "pause_before_installing",
  "installing",
  "pause_before_rebooting",
  "rebooting",
  "pause_before_committing",
  "success",
  "failure",
  "already-installed",
] as const;
export type DeploymentStatus = (typeof DEPLOYMENT_STATUSES)[number];

/** Bounds of what a client may send: identity and inventory are a few KB on a real device. */
export const LIMITS = { identity: 4096, attributes: 256, value: 4096, logMessages: 10_000 } as const;

const fieldError = (field: string, what: string) => ({ error: `field "${field}" ${what}` });

/** `id_data`'s parsed form: attribute name to value (a string, or a list for repeated ones). */
export const IdentityData = z.record(z.string().max(256), z.union([z.string().max(LIMITS.value), z.array(z.string().max(LIMITS.value)).max(64)]), {
  error: 'field "id_data" must be a JSON object of strings',
});
export type IdentityData = z.infer<typeof IdentityData>;

/** `POST /api/devices/v1/authentication/auth_requests`, signed as sent (`X-MEN-Signature`). */
export const AuthRequest = z
  .object({
    id_data: z.string(fieldError("id_data", "must be a string (JSON of the identity)")).min(2, fieldError("id_data", "must not be empty")).max(LIMITS.identity, fieldError("id_data", "is too long")),
    pubkey: z.string(fieldError("pubkey", "must be a PEM public key")).min(1, fieldError("pubkey", "must be a PEM public key")),
    tenant_token: z.string().optional().describe("ignored: labgate has one tenant"),
  })
  .meta({ id: "MenderAuthRequest" });
export type AuthRequest = z.infer<typeof AuthRequest>;

const AttributeValue = z.union([z.string().max(LIMITS.value), z.number(), z.array(z.union([z.string().max(LIMITS.value), z.number()])).max(256)]);

/** `PATCH` and `PUT /api/devices/v1/inventory/device/attributes`: the device's inventory. */
export const InventoryAttributes = z
  .array(z.object({ name: z.string().min(1).max(256), value: AttributeValue, description: z.string().optional() }), { error: "expected a list of {name, value} attributes" })
  .max(LIMITS.attributes, `at most ${LIMITS.attributes} attributes`)
  .meta({ id: "MenderInventory" });
export type InventoryAttributes = z.infer<typeof InventoryAttributes>;

/** What a device runs, as the next-deployment call names it. */
export const DeviceProvides = z.looseObject({
  device_type: z.string(fieldError("device_type", "must be a non-empty string")).min(1, fieldError("device_type", "must be a non-empty string")),
  artifact_name: z.string(fieldError("artifact_name", "must be a non-empty string")).min(1, fieldError("artifact_name", "must be a non-empty string")),
});

/** `POST /api/devices/v2/deployments/device/deployments/next`. */
export const NextRequest = z
  .object({ device_provides: DeviceProvides, update_control_map: z.boolean().optional() }, { error: 'expected {"device_provides": {"device_type", "artifact_name"}}' })
  .meta({ id: "MenderNextRequest" });

/** `GET /api/devices/v1/deployments/device/deployments/next?artifact_name=&device_type=`. */
export const NextQuery = z.object({
  artifact_name: z.string(fieldError("artifact_name", "must be given")).min(1, fieldError("artifact_name", "must be given")),
  device_type: z.string(fieldError("device_type", "must be given")).min(1, fieldError("device_type", "must be given")),
});

/** The next-deployment answer: the artifact to install and where to download it. */
export const DeploymentInstructions = z
  .object({
    id: z.string().describe("the deployment as the device names it in its status reports"),
    artifact: z.object({
      id: z.string(),
      artifact_name: z.string().describe("the package's version"),
      source: z.object({ uri: z.string().describe("a signed, expiring link to the package"), expire: z.string().describe("RFC 3339") }),
      device_types_compatible: z.array(z.string()),
    }),
  })
  .meta({ id: "MenderDeploymentInstructions" });
export type DeploymentInstructions = z.infer<typeof DeploymentInstructions>;

/** `PUT .../deployments/device/deployments/{id}/status`. */
export const StatusReport = z
  .object({ status: z.enum(DEPLOYMENT_STATUSES, fieldError("status", `must be one of ${DEPLOYMENT_STATUSES.join(", ")}`)), substate: z.string().max(1024).optional() })
  .meta({ id: "MenderStatusReport" });

/** `PUT .../deployments/device/deployments/{id}/log`: the client's log of a failed deployment. */
export const DeploymentLog = z
  .object({
    messages: z
      .array(z.object({ timestamp: z.string().optional(), level: z.string().optional(), message: z.string() }), fieldError("messages", "must be a list of {timestamp, level, message}"))
      .max(LIMITS.logMessages),
  })
  .meta({ id: "MenderDeploymentLog" });
export type DeploymentLog = z.infer<typeof DeploymentLog>;

/** Mender's error body. */
export const MenderError = z.object({ error: z.string(), request_id: z.string() }).meta({ id: "MenderError" });
export type MenderError = z.infer<typeof MenderError>;
