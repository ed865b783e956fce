import { Hono } from "hono";
import * as z from "zod";
import { errors, ok, onObject, route } from "../../http/openapi.ts";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { Scope } from "../../auth/scopes.ts";
import { LabgateError } from "../../util/errors.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { StorageNameError, type LocalStorage } from "../../storage/local.ts";
import { publicBase, signedObjectUrl } from "../../storage/routes.ts";
import { authorize, deletePermissionsOf, grantCreator, permissionFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { artifactPayloadTypes, fieldsWithArtifactHeader, uploadScopeRefusal } from "./artifact.ts";
import { checkUploadFields, createPackage, deletePackage, getPackage, listPackages, packageKeys, packageUsage, toView } from "./packages.ts";
import { Package, PackageLink, PackageUpload, PackageUsage } from "./schema.ts";
import { readMultipart } from "../../http/multipart.ts";
import { dateOf } from "../../util/time.ts";

const UPLOAD_SCOPES: Scope[] = ["upload_single_file", "upload_rootfs_image", "upload_nonstandard_artifact", "admin_rw"];
const WHAT = "specified package";
const MSG_NOT_FOUND = `${WHAT} does not exist`;

const { 400: e400, 401: e401, 403: e403, 404: e404, 409: e409, 413: e413 } = errors;

/** Packages: upload, list, get, delete, download link. Each route with its operation (src/http/openapi.ts, `route`). */
export function packagesRoutes(ctx: AppContext, auth: Auth, storage: LocalStorage): Hono<AppEnv> {
  const keys = packageKeys(ctx.config.prefix);
  const app = new Hono<AppEnv>();
  const tag = "packages";

  route(app, { method: "get", path: "/api/v1/packages", tag, access: "management", summary: "Packages the caller may read", responses: { 200: ok(z.array(Package), "OK"), 401: e401 } }, auth.management(), (c) =>
    // Alias `pkg`: the permission filter uses `p` for the permissions table itself.
    c.json(listPackages(ctx.db, permissionFilter(c.get("identity"), "package", "pkg")).map(toView)),
  );

  route(
    app,
    {
      method: "post",
      path: "/api/v1/packages",
      tag,
      access: "management",
      summary: `Upload a package (multipart: \`file\` and metadata fields such as ${keys.version})`,
      body: { multipart: PackageUpload },
      responses: { 200: ok(Package, "OK"), 400: e400, 401: e401, 403: e403, 404: e404, 409: e409, 413: e413 },
    },
    auth.management(...UPLOAD_SCOPES),
    async (c) => {
      const identity = c.get("identity");
      if (identity.kind !== "mgmt") throw new LabgateError("unauthenticated", "a management token is required");
      const { fields: given, file: staged } = await readMultipart(c, {
        file: { field: "file", receive: (stream) => storage.stage(stream), discard: (object) => storage.discard(object) },
        // All text fields together become the package's metadata: bound what one upload can store.
        limits: { fieldSize: 64 * 1024, fields: 1000, fieldNameSize: 1024, fieldsTotal: 1024 * 1024 },
        texts: { notMultipart: "expected a multipart/form-data body", malformed: "malformed multipart/form-data", interrupted: "upload failed" },
      });
      try {
        // A Mender artifact names its version and device types: the form need not repeat them.
        const fields = staged ? await fieldsWithArtifactHeader(staged.tmpPath, given, keys) : given;
        const problem = checkUploadFields(keys, fields, staged !== undefined, ctx.config.compat.package_device_type_required);
        if (problem) throw new LabgateError("invalid", problem);
        const dir = storage.normalizeDir(fields.get(keys.storageDirectory));
        // The upload scope follows the artifact's payload types, read from the stored bytes.
        const refusal = uploadScopeRefusal(identity.scopes, await artifactPayloadTypes(staged!.tmpPath), ctx.config.prefix);
        if (refusal) throw new LabgateError("forbidden", refusal);
        const row = await createPackage(ctx, storage, { staged: staged!, fields, dir, user: identity.user, onCreated: (tx, id) => grantCreator(tx, identity, "package", id, dateOf(ctx.clock)), actor: actorOf(c, ctx.clock) });
        return c.json(toView(row));
      } catch (error) {
        if (staged) await storage.discard(staged); // no-op once the object was moved into place
        // A directory that is not allowed, or that cannot be made (normalizeDir, commit).
        if (error instanceof StorageNameError) throw new LabgateError("invalid", `invalid ${keys.storageDirectory}: ${error.message}`);
        throw error;
      }
    },
  );

  route(app, { method: "get", path: "/api/v1/packages/:id", tag, access: "management", summary: "One package", responses: { 200: ok(Package, "OK"), ...onObject } }, auth.management(), (c) => {
    const id = pathId(c.req.param("id"), WHAT);
    authorize(ctx.db, c.get("identity"), "package", id, "read");
    const row = getPackage(ctx.db, id);
    if (!row) throw new LabgateError("not_found", MSG_NOT_FOUND);
    return c.json(toView(row));
  });

  route(
    app,
    { method: "get", path: "/api/v1/packages/:id/usage", tag, access: "management", summary: "Where a package is used: its groups and their deployments of its version", responses: { 200: ok(PackageUsage, "OK"), ...onObject } },
    auth.management(),
    (c) => {
      const id = pathId(c.req.param("id"), WHAT);
      const identity = c.get("identity");
      authorize(ctx.db, identity, "package", id, "read");
      const row = getPackage(ctx.db, id);
      if (!row) throw new LabgateError("not_found", MSG_NOT_FOUND);
      return c.json(packageUsage(ctx.db, row, ctx.config.prefix, permissionFilter(identity, "group", "g")));
    },
  );

  route(
    app,
    { method: "delete", path: "/api/v1/packages/:id", tag, access: "management", summary: "Delete a package (not while a group has it)", responses: { 200: ok(), ...onObject, 409: e409 } },
    auth.management(),
    async (c) => {
      const id = pathId(c.req.param("id"), WHAT);
      authorize(ctx.db, c.get("identity"), "package", id, "delete");
      const result = await deletePackage(ctx, storage, id, actorOf(c, ctx.clock), (tx) => deletePermissionsOf(tx, "package", id));
      if (result === "not_found") throw new LabgateError("not_found", MSG_NOT_FOUND);
      if (result === "assigned") throw new LabgateError("conflict", "delete failed, the package is assigned to at least one group");
      return c.json({});
    },
  );

  route(
    app,
    { method: "get", path: "/api/v1/packages/:id/download", tag, access: "management", summary: "A signed, expiring download link", responses: { 200: ok(PackageLink, "OK"), ...onObject } },
    auth.management(),
    (c) => {
      const id = pathId(c.req.param("id"), WHAT);
      authorize(ctx.db, c.get("identity"), "package", id, "read");
      const row = getPackage(ctx.db, id);
      if (!row) throw new LabgateError("not_found", MSG_NOT_FOUND);
      const link: PackageLink = { id: row.id, download_url: signedObjectUrl(ctx, publicBase(ctx, c), row.storage_name) };
      return c.json(link);
    },
  );

  return app;
}
