/**
 * The system routes' shapes (src/http/system.ts: health, whoami; src/server/openapi.ts: the
 * document itself), each once. Zod only: the console imports the types (`Caller` is who is
 * signed in).
 */
import * as z from "zod";

/** GET /api/health. */
export const Health = z
  .object({
    status: z.enum(["ok", "degraded"]).describe("degraded: the database is not writable (503)"),
    version: z.string(),
    uptime: z.int().describe("seconds since the start"),
    database: z.object({
      engine: z.enum(["embedded", "postgres"]).describe("embedded: sql.js in the data dir; postgres: database.url"),
      schema_version: z.int().describe("the newest migration step applied"),
      state: z.enum(["ok", "failed"]),
      error: z.string().optional().describe("why writes fail"),
      wasm: z.enum(["sea-asset", "env", "node_modules"]).optional().describe("embedded: where sql.js's WebAssembly came from"),
      image_bytes: z.int().optional().describe("embedded"),
      journal_bytes: z.int().optional().describe("embedded"),
      generation: z.int().optional().describe("embedded"),
      last_checkpoint: z.string().nullable().optional().describe("embedded"),
      connections: z.object({ total: z.int(), idle: z.int(), waiting: z.int() }).optional().describe("postgres: the pool's connections, and requests waiting for one"),
    }),
  })
  .meta({ id: "Health" });
export type Health = z.infer<typeof Health>;

/** What the server makes of a management token or console session (GET /api/whoami, the login answer). */
export const Caller = z
  .object({
    kind: z.literal("mgmt"),
    sub: z.string().describe("the account"),
    scopes: z.array(z.string()).describe("prefixed scope names (svc_admin_rw)"),
    expires: z.string().describe("ISO 8601"),
    id: z.string().optional().describe("the token's id (jti), for POST /api/v1/tokens/revoke"),
  })
  .meta({ id: "Caller" });
export type Caller = z.infer<typeof Caller>;

/** What the server makes of a device token (GET /api/whoami). */
export const DeviceCaller = z
  .object({ kind: z.literal("device"), sub: z.string().describe("the device's MAC address"), device_id: z.int(), expires: z.string().describe("ISO 8601") })
  .meta({ id: "DeviceCaller" });
export type DeviceCaller = z.infer<typeof DeviceCaller>;

/** GET /api/openapi.json. */
export const OpenApiDocument = z.record(z.string(), z.unknown());
