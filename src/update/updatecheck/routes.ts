import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import { readJson } from "../../http/body.ts";
import { errors, ok, route } from "../../http/openapi.ts";
import { LabgateError } from "../../util/errors.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { publicBase } from "../../storage/routes.ts";
import type { UpdateProgress } from "../progress/progress.ts";
import type { UpdateCatalog } from "./catalog.ts";
import { checkBody, checkKeys, sameMac, updateCheck, type Steering } from "./check.ts";
import { UpdateCheck, UpdateOffer } from "./schema.ts";


/** `POST /api/v1/update/check` with a device token. */
export function updateCheckRoutes(ctx: AppContext, auth: Auth, progress: UpdateProgress, catalog: UpdateCatalog, deployments: Steering): Hono<AppEnv> {
  const macKey = checkKeys(ctx.config.prefix).mac;
  const app = new Hono<AppEnv>();
  route(
    app,
    {
      method: "post",
      path: "/api/v1/update/check",
      tag: "updates",
      access: "device",
      summary: "A device asks for an update (its metadata in the body; docs/update-server.md, \"Update checks\")",
      body: { json: UpdateCheck(ctx.config.prefix), parsedBy: "handler" },
      responses: { 200: ok(UpdateOffer, "An update"), 204: { description: "No update" }, 400: errors[400], 401: errors[401], 403: errors[403], 413: errors[413] },
    },
    auth.device(),
    async (c) => {
      const device = c.get("identity");
      if (device.kind !== "device") throw new LabgateError("unauthenticated", "a device token is required");
      const metadata = checkBody(await readJson(c), ctx.config.prefix);
      if (typeof metadata === "string") throw new LabgateError("invalid", metadata);
      if (!sameMac(metadata[macKey] as string, device.mac)) throw new LabgateError("forbidden", `${macKey} does not belong to the device of this token`);
      const offer = await updateCheck(ctx, progress, catalog, deployments, device, metadata, publicBase(ctx, c));
      return offer ? c.json(offer) : c.body(null, 204);
    },
  );
  return app;
}
