/**
 * The packages API's shapes, each once: the handlers answer with these types, the OpenAPI
 * document shows these schemas (packages/routes.ts registers them with the routes) and the
 * console imports the types.
 */
import * as z from "zod";
import { Rfc822, strictBody } from "../../util/shapes.ts";

/** The upload's text fields, and the storage driver's `<prefix>.storage.*` keys (the object's size a number). */
export const PackageMetadata = z.record(z.string(), z.union([z.string(), z.number()]));
export type PackageMetadata = z.infer<typeof PackageMetadata>;

/** A package. */
export const Package = z
  .object({
    id: z.int(),
    created: Rfc822,
    sha256: z.string().describe("of the file, hex"),
    driver: z.string().describe("the storage driver: local"),
    metadata: PackageMetadata,
  })
  .meta({ id: "Package" });
export type Package = z.infer<typeof Package>;

/** GET /api/v1/packages/{id}/usage: the groups that have the package, and their deployments of its version. */
export const PackageUsage = z
  .object({
    groups: z.array(z.object({ id: z.int(), name: z.string().nullable() })).describe("groups the caller may read that have the package"),
    deployments: z
      .array(z.object({ id: z.int(), group_id: z.int(), version: z.string(), status: z.string(), created: z.string().describe("ISO 8601") }))
      .describe("deployments of the package's version to those groups, newest first (at most 100)"),
  })
  .meta({ id: "PackageUsage" });
export type PackageUsage = z.infer<typeof PackageUsage>;

/** A signed, expiring link to a package's file. */
export const PackageLink = z.object({ id: z.int(), download_url: z.string().describe("absolute; works without a token until it expires") }).meta({ id: "PackageLink" });
export type PackageLink = z.infer<typeof PackageLink>;

/** The upload form: the file and metadata fields (`<prefix>.software.version`, ...). */
export const PackageUpload = z.looseObject({ file: z.string().describe("the package file") });

/** POST /api/v1/packages/{id}/delta: make a delta of the package from another (the base). */
export const DeltaRequest = strictBody({ from: z.int({ error: 'schema validation failed: field "from" must be a package id' }).positive({ error: 'schema validation failed: field "from" must be a package id' }) });

/** A delta being made, or made (the newest 50 are kept). */
export const DeltaJob = z
  .object({
    id: z.int(),
    base: z.int().describe("the package it is a delta from"),
    target: z.int().describe("the package it makes"),
    state: z.enum(["queued", "running", "done", "failed"]),
    progress: z.int().describe("0..100, of the target's bytes read"),
    package: z.int().optional().describe("the delta package, once done"),
    error: z.string().optional(),
  })
  .meta({ id: "DeltaJob" });
export type DeltaJob = z.infer<typeof DeltaJob>;
