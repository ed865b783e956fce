// Every operation of the API, for GET /api/openapi.json (loaded on its first request: these
// modules build hundreds of zod schemas that a start does not need, issue 31) and docs/routes.md.
import * as z from "zod";
import type { Config } from "../config/config.ts";
import { accountOperations } from "../accounts/openapi.ts";
import { consoleOperations } from "../console/openapi.ts";
import { errors, type Operation } from "../http/openapi.ts";
import { testRunOperations } from "../testrun/openapi.ts";

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

/** The operations of the areas that do not register theirs with their routes yet (`route`). */
export const listedOperations = (config: Config): Operation[] => [
  ...systemOperations,
  ...accountOperations,
  ...testRunOperations(config),
  ...consoleOperations,
];

/** Every operation of the document: the listed ones and those the routers registered. */
export const apiOperations = (config: Config, registered: readonly Operation[]): Operation[] => [...listedOperations(config), ...registered];
