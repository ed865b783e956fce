/*
 * Mender's device API at Mender's paths, for an unchanged mender-client (its shapes:
 * src/protocol/mender/device.ts). Each handler parses, calls MenderDevices (./service.ts) and
 * shapes Mender's answer; errors are in Mender's shape, `{"error", "request_id"}`.
 */
import { Hono, type Context } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { readBodyBytes, parseJsonBody } from "../../http/body.ts";
import { answerOrInternal } from "../../http/errors.ts";
import { firstMessage, route, type Reply } from "../../http/openapi.ts";
import { clientAddress } from "../../http/transport.ts";
import { publicBase } from "../../storage/routes.ts";
import { LabgateError } from "../../util/errors.ts";
import type { z } from "zod";
import { AuthRequest, DeploymentInstructions, DeploymentLog, InventoryAttributes, MenderError, NextQuery, NextRequest, StatusReport } from "../../protocol/mender/device.ts";
import type { DeploymentService } from "../deployments/service.ts";
import type { UpdateProgress } from "../progress/progress.ts";
import type { UpdateCatalog } from "../updatecheck/catalog.ts";
import { AUTH_BODY_LIMIT } from "../registration/routes.ts";
import { MenderDevices } from "./service.ts";

const tag = "mender";
const failed = (description: string): Reply => ({ description, json: MenderError });
const deviceErrors = { 400: failed("Malformed request"), 401: failed("No valid device token") };

/** A body or query checked against its schema; a mismatch is a 400 naming the first problem. */
function parsed<T extends z.ZodType>(schema: T, value: unknown): z.output<T> {
  const result = schema.safeParse(value);
  if (!result.success) throw new LabgateError("invalid", firstMessage(result.error));
  return result.data;
}

function deviceOf(c: Context<AppEnv>) {
  const identity = c.get("identity");
  if (identity.kind !== "device") throw new LabgateError("unauthenticated", "a device token is required");
  return identity;
}

export function menderRoutes(ctx: AppContext, auth: Auth, deployments: DeploymentService, progress: UpdateProgress, catalog: UpdateCatalog): Hono<AppEnv> {
  const mender = new MenderDevices(ctx, deployments, progress, catalog);
  const app = new Hono<AppEnv>();
  app.onError((error, c) => {
    const answer = answerOrInternal(error, ctx.log, `${c.req.method} ${c.req.path}`, { request_id: c.get("requestId"), method: c.req.method, path: c.req.path });
    const body: MenderError = { error: answer.message, request_id: c.get("requestId") };
    return c.json(body, answer.status);
  });

  route(
    app,
    {
      method: "post",
      path: "/api/devices/v1/authentication/auth_requests",
      tag,
      access: "public",
      summary: "A Mender client asks for a token: id_data and pubkey, X-MEN-Signature over the body; unknown devices become pending registrations",
      body: { json: AuthRequest, anyType: true },
      responses: { 200: { description: "The device token, as the body", media: "application/jwt" }, 400: failed("Malformed request"), 401: failed("Not (yet) accepted, or a bad signature"), 413: failed("Body too large") },
    },
    async (c) => {
      const raw = await readBodyBytes(c, AUTH_BODY_LIMIT);
      const body = parsed(AuthRequest, parseJsonBody(raw));
      const result = await mender.authorize(raw, body, c.req.header("x-men-signature"), clientAddress(c));
      if (result.status === "pending") throw new LabgateError("unauthenticated", "unauthorized");
      return c.body(result.token, 200, { "Content-Type": "application/jwt" });
    },
  );

  const inventory = (merge: boolean) => async (c: Context<AppEnv>, { body }: { body: z.output<typeof InventoryAttributes> }) => {
    await mender.inventory(deviceOf(c), body, merge);
    return c.body(null, 200);
  };
  const inventoryResponses = { 200: { description: "Stored" }, ...deviceErrors };
  route(
    app,
    {
      method: "patch",
      path: "/api/devices/v1/inventory/device/attributes",
      tag,
      access: "device",
      summary: "A Mender client's inventory: these attributes join the device's metadata",
      body: { json: InventoryAttributes },
      responses: inventoryResponses,
    },
    auth.device(),
    inventory(true),
  );
  route(
    app,
    {
      method: "put",
      path: "/api/devices/v1/inventory/device/attributes",
      tag,
      access: "device",
      summary: "A Mender client's inventory: these attributes replace the device's reported ones",
      body: { json: InventoryAttributes },
      responses: inventoryResponses,
    },
    auth.device(),
    inventory(false),
  );

  const next = async (c: Context<AppEnv>, provides: { artifact_name: string; device_type: string }) => {
    const answer = await mender.next(deviceOf(c), provides, publicBase(ctx, c));
    return answer ? c.json(answer, 200) : c.body(null, 204);
  };
  const nextResponses = { 200: { description: "The artifact to install", json: DeploymentInstructions }, 204: { description: "Nothing to install" }, ...deviceErrors };
  route(
    app,
    {
      method: "post",
      path: "/api/devices/v2/deployments/device/deployments/next",
      tag,
      access: "device",
      summary: "A Mender client asks for a deployment (what it runs in device_provides): labgate's update check",
      body: { json: NextRequest },
      responses: nextResponses,
    },
    auth.device(),
    async (c, { body }) => next(c, body.device_provides),
  );
  route(
    app,
    { method: "get", path: "/api/devices/v1/deployments/device/deployments/next", tag, access: "device", summary: "The same, in Mender's v1 form (artifact_name and device_type in the query)", query: NextQuery, responses: nextResponses },
    auth.device(),
    async (c, { query }) => next(c, query),
  );

  route(
    app,
    {
      method: "put",
      path: "/api/devices/v1/deployments/device/deployments/:id/status",
      tag,
      access: "device",
      summary: "A Mender client's deployment status: the device's state and outcome in the deployment",
      body: { json: StatusReport },
      responses: { 204: { description: "Recorded" }, ...deviceErrors, 404: failed("No such deployment"), 409: failed("The deployment was aborted: the client stops it") },
    },
    auth.device(),
    async (c, { body }) => {
      await mender.status(deviceOf(c), c.req.param("id") ?? "", body.status);
      return c.body(null, 204);
    },
  );
  route(
    app,
    {
      method: "put",
      path: "/api/devices/v1/deployments/device/deployments/:id/log",
      tag,
      access: "device",
      summary: "A Mender client's log of a failed deployment: its last 4 KiB are the failure's output",
      body: { json: DeploymentLog },
      responses: { 204: { description: "Recorded" }, ...deviceErrors, 404: failed("No such deployment") },
    },
    auth.device(),
    async (c, { body }) => {
      await mender.log(deviceOf(c), c.req.param("id") ?? "", body);
      return c.body(null, 204);
    },
  );
  return app;
}
