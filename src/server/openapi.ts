import { Hono } from "hono";
import { openApiDocument, route, type Operation } from "../http/openapi.ts";
import { OpenApiDocument } from "../http/schema.ts";
import type { AppContext, AppEnv } from "../app/context.ts";

/**
 * `GET /api/openapi.json` (public: it describes the API, it holds no data or secrets), made on the
 * first request from `registered`: the operations every router registered with its routes
 * (filled by createApp as it mounts the routers).
 */
export function openApiRoutes(ctx: AppContext, registered: readonly Operation[]): Hono<AppEnv> {
  let document: Record<string, unknown> | undefined;
  const app = new Hono<AppEnv>();
  route(app, { method: "get", path: "/api/openapi.json", tag: "system", access: "public", summary: "This document", responses: { 200: { description: "OpenAPI 3.1", json: OpenApiDocument } } }, (c) => {
    document ??= openApiDocument([...registered], {
      title: "labgate",
      version: ctx.version,
      description: "Device update management and test runs, one appliance.",
    });
    return c.json(document);
  });
  return app;
}
