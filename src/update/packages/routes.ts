import { Hono } from "hono";
import * as z from "zod";
import { errors, ok, objectRefusals, route, routes } from "../../http/openapi.ts";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { Scope } from "../../auth/scopes.ts";
import type { AppContext, AppEnv, Identity } from "../../app/context.ts";
import type { StagedObject } from "../../storage/local.ts";
import type { PackageStorage } from "../../storage/packages.ts";
import { objectLink, publicBase } from "../../storage/routes.ts";
import { pathId } from "../validation.ts";
import { packageUsage } from "../deployments/usage.ts";
import { fullPackageOf, packageKeys, readablePackage, readablePackages, removePackage, toView, uploadPackage, type PackageRow } from "./packages.ts";
import { DeltaJob, DeltaRequest, Package, PackageLink, PackageUpload, PackageUsage } from "./schema.ts";
import { DeltaMaker } from "./deltas.ts";
import { versionsRunning } from "../devices/devices.ts";
import { signaturePolicy, stageChecked, type SignatureMark } from "./signing.ts";
import { readMultipart } from "../../http/multipart.ts";

const UPLOAD_SCOPES: Scope[] = ["upload_single_file", "upload_rootfs_image", "upload_nonstandard_artifact", "admin_rw"];
const WHAT = "specified package";


/** Packages: upload, list, get, delete, download link. Each route with its operation (src/http/openapi.ts, `route`). */
export function packagesRoutes(ctx: AppContext, auth: Auth, storage: PackageStorage) {
  const keys = packageKeys(ctx.config.prefix);
  const signing = signaturePolicy(ctx.config.update_server.signing);
  const app = new Hono<AppEnv>();
  const tag = "packages";

  const getPackages = route(app, { method: "get", path: "/api/v1/packages", tag, access: "management", summary: "Packages the caller may read", responses: { 200: ok(z.array(Package), "OK"), 401: errors[401] } }, auth.management(), async (c) =>
    c.json((await readablePackages(ctx.store.query, c.get("identity"))).map(toView)),
  );

  const postPackages = route(
    app,
    {
      method: "post",
      path: "/api/v1/packages",
      tag,
      access: "management",
      summary: `Upload a package (multipart: \`file\` and metadata fields such as ${keys.version})`,
      body: { multipart: PackageUpload },
      responses: { 200: ok(Package, "OK"), 400: errors[400], 401: errors[401], 403: errors[403], 404: errors[404], 409: errors[409], 413: errors[413], 503: errors[503] },
    },
    auth.management(...UPLOAD_SCOPES),
    async (c) => {
      const { fields, file: received } = await readMultipart(c, {
        file: {
          field: "file",
          // With signing keys the upload is checked as it streams in (signing.ts).
          receive: (stream): Promise<{ staged: StagedObject; signature?: SignatureMark }> =>
            signing ? stageChecked(storage, stream, signing) : storage.stage(stream).then((staged) => ({ staged })),
          discard: (object) => storage.discard(object.staged),
        },
        // All text fields together become the package's metadata: bound what one upload can store.
        limits: { fieldSize: 64 * 1024, fields: 1000, fieldNameSize: 1024, fieldsTotal: 1024 * 1024 },
        texts: { notMultipart: "expected a multipart/form-data body", malformed: "malformed multipart/form-data", interrupted: "upload failed" },
      });
      const identity = c.get("identity");
      const row = await uploadPackage(ctx, storage, identity, { staged: received?.staged, fields, signature: received?.signature }, actorOf(c, ctx.clock));
      await autoDeltas(row, identity, actorOf(c, ctx.clock));
      return c.json(toView(row));
    },
  );

  const deltas = new DeltaMaker(ctx, storage);
  /** update_server.deltas auto: deltas of a new package from each version its devices run now. */
  const autoDeltas = async (row: PackageRow, identity: Identity, actor: ReturnType<typeof actorOf>) => {
    if (ctx.config.update_server.deltas !== "auto" || identity.kind !== "mgmt") return;
    for (const version of await versionsRunning(ctx.store, ctx.config.prefix, row.devtype)) {
      const base = version === row.version ? undefined : await fullPackageOf(ctx.store.query, version, row.devtype);
      if (!base) continue;
      try {
        await deltas.request(identity, row.id, base.id, actor);
      } catch (error) {
        ctx.log.warn(`package ${row.id}: no delta from ${base.id}: ${(error as Error).message}`);
      }
    }
  };

  const getPackagesDeltas = route(
    app,
    { method: "get", path: "/api/v1/packages/deltas", tag, access: "management", summary: "Deltas being made and made (the newest 50) of packages the caller may read, with their progress", responses: { 200: ok(z.array(DeltaJob), "OK"), 401: errors[401] } },
    auth.management(),
    async (c) => c.json((await deltas.list(c.get("identity"))) satisfies DeltaJob[]),
  );

  const postPackagesByIdDelta = route(
    app,
    {
      method: "post",
      path: "/api/v1/packages/:id/delta",
      tag,
      access: "management",
      summary: "Make a delta of the package from another (xdelta3, in the background, one at a time): a package of this one's version that requires the base's",
      body: { json: DeltaRequest },
      responses: { 202: ok(DeltaJob, "Queued"), 400: errors[400], ...objectRefusals, 503: { description: "xdelta3 is not installed on the gateway", json: errors[400].json } },
    },
    auth.management(...UPLOAD_SCOPES),
    async (c, { body }) => c.json(await deltas.request(c.get("identity"), pathId(c.req.param("id"), WHAT), body.from, actorOf(c, ctx.clock)), 202),
  );

  const getPackagesById = route(app, { method: "get", path: "/api/v1/packages/:id", tag, access: "management", summary: "One package", responses: { 200: ok(Package, "OK"), ...objectRefusals } }, auth.management(), async (c) => {
    const id = pathId(c.req.param("id"), WHAT);
    return c.json(toView(await readablePackage(ctx.store.query, c.get("identity"), id)));
  });

  const getPackagesByIdUsage = route(
    app,
    { method: "get", path: "/api/v1/packages/:id/usage", tag, access: "management", summary: "Where a package is used: its groups and their deployments of its version", responses: { 200: ok(PackageUsage, "OK"), ...objectRefusals } },
    auth.management(),
    async (c) => {
      const id = pathId(c.req.param("id"), WHAT);
      return c.json(await packageUsage(ctx, c.get("identity"), id, ctx.config.prefix));
    },
  );

  const deletePackagesById = route(
    app,
    { method: "delete", path: "/api/v1/packages/:id", tag, access: "management", summary: "Delete a package (not while a group has it)", responses: { 200: ok(), ...objectRefusals, 409: errors[409] } },
    auth.management(),
    async (c) => {
      const id = pathId(c.req.param("id"), WHAT);
      await removePackage(ctx, storage, c.get("identity"), id, actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  const getPackagesByIdDownload = route(
    app,
    { method: "get", path: "/api/v1/packages/:id/download", tag, access: "management", summary: "A signed, expiring download link (a presigned URL of the S3 store unless storage.s3.proxy)", responses: { 200: ok(PackageLink, "OK"), ...objectRefusals, 503: errors[503] } },
    auth.management(),
    async (c) => {
      const id = pathId(c.req.param("id"), WHAT);
      const row = await readablePackage(ctx.store.query, c.get("identity"), id);
      const link: PackageLink = { id: row.id, download_url: await objectLink(ctx, publicBase(ctx, c), row.storage_name) };
      return c.json(link);
    },
  );

  return routes(app, getPackages, postPackages, getPackagesDeltas, postPackagesByIdDelta, getPackagesById, getPackagesByIdUsage, deletePackagesById, getPackagesByIdDownload);
}
