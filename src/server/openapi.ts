import { Hono } from "hono";
import { openApiDocument } from "../http/openapi.ts";
import type { AppContext, AppEnv } from "../app/context.ts";

/** `GET /api/openapi.json` (public: it describes the API, it holds no data or secrets). */
export function openApiRoutes(ctx: AppContext): Hono<AppEnv> {
  let document: Record<string, unknown> | undefined;
  return new Hono<AppEnv>().get("/api/openapi.json", async (c) => {
    const { apiOperations } = await import("./operations.ts");
    document ??= openApiDocument(apiOperations(ctx.config), {
      title: "labgate",
      version: ctx.version,
      description: "Device update management and test runs, one appliance (update-server.md, test-run-server.md).",
    });
    return c.json(document);
  });
}
