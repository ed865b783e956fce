import { Hono } from "hono";
import { z } from "zod";
import type { Config } from "../config/config.ts";
import { accountOperations } from "../accounts/openapi.ts";
import { auditOperations } from "../audit/routes.ts";
import { backupOperations } from "../backup/routes.ts";
import { consoleOperations } from "../console/openapi.ts";
import { errors, openApiDocument, type Operation } from "../http/openapi.ts";
import { testRunOperations } from "../testrun/openapi.ts";
import { updateOperations } from "../update/openapi.ts";
import type { AppContext, AppEnv } from "../app/context.ts";

/** The system routes (src/http/system.ts) and this one. */
const systemOperations: Operation[] = [
  {
    method: "get",
    path: "/api/health",
    tag: "system",
    access: "public",
    summary: "Is the appliance up and its database writable",
    responses: {
      200: { description: "Up", json: z.looseObject({ status: z.enum(["ok", "degraded"]), version: z.string(), uptime: z.int(), database: z.looseObject({ state: z.string() }) }) },
      503: { description: "The database is not writable", json: z.looseObject({ status: z.literal("degraded") }) },
    },
  },
  {
    method: "get",
    path: "/api/whoami",
    tag: "system",
    access: "any",
    summary: "What the server makes of a token",
    responses: {
      200: { description: "The caller", json: z.looseObject({ kind: z.enum(["mgmt", "device"]), sub: z.string(), expires: z.string() }) },
      401: errors[401],
    },
  },
  { method: "get", path: "/api/openapi.json", tag: "system", access: "public", summary: "This document", responses: { 200: { description: "OpenAPI 3.1", json: z.record(z.string(), z.unknown()) } } },
];

/** Every operation the appliance serves with `config`, as its routes are registered. */
export const apiOperations = (config: Config): Operation[] => [
  ...systemOperations,
  ...accountOperations,
  ...updateOperations(config),
  ...testRunOperations(config),
  ...backupOperations,
  ...auditOperations,
  ...consoleOperations,
];

/** `GET /api/openapi.json` (public: it describes the API, it holds no data or secrets). */
export function openApiRoutes(ctx: AppContext): Hono<AppEnv> {
  let document: Record<string, unknown> | undefined;
  return new Hono<AppEnv>().get("/api/openapi.json", (c) => {
    document ??= openApiDocument(apiOperations(ctx.config), {
      title: "labgate",
      version: ctx.version,
      description: "Device update management and test runs, one appliance (update-server.md, test-run-server.md).",
    });
    return c.json(document);
  });
}
