import { Hono } from "hono";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { Scope } from "../../auth/scopes.ts";
import { LabgateError } from "../../util/errors.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { StorageNameError, type LocalStorage } from "../../storage/local.ts";
import { publicBase, signedObjectUrl } from "../../storage/routes.ts";
import { authorize, deletePermissionsOf, grantCreator, permissionFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { artifactPayloadTypes, uploadScopeRefusal } from "./artifact.ts";
import { checkUploadFields, createPackage, deletePackage, getPackage, packageKeys, toView, type PackageRow } from "./packages.ts";
import { readMultipart } from "../../http/multipart.ts";
import { dateOf } from "../../util/time.ts";

const UPLOAD_SCOPES: Scope[] = ["upload_single_file", "upload_rootfs_image", "upload_nonstandard_artifact", "admin_rw"];
const WHAT = "specified package";
const MSG_NOT_FOUND = `${WHAT} does not exist`;

/** Packages (update-server.md 4): upload, list, get, delete, download link. */
export function packagesRoutes(ctx: AppContext, auth: Auth, storage: LocalStorage): Hono<AppEnv> {
  const keys = packageKeys(ctx.config.prefix);
  const app = new Hono<AppEnv>();

  app.get("/api/v1/packages", auth.management(), (c) => {
    // Alias `pkg`: the permission filter uses `p` for the permissions table itself.
    const filter = permissionFilter(c.get("identity"), "package", "pkg");
    const rows = ctx.db.all<PackageRow>(
      `SELECT pkg.* FROM packages pkg${filter ? ` WHERE ${filter.sql}` : ""} ORDER BY pkg.id`,
      filter?.params ?? [],
    );
    return c.json(rows.map(toView));
  });

  app.post("/api/v1/packages", auth.management(...UPLOAD_SCOPES), async (c) => {
    const identity = c.get("identity");
    if (identity.kind !== "mgmt") throw new LabgateError("unauthenticated", "a management token is required");
    const { fields, file: staged } = await readMultipart(c, {
      file: { field: "file", receive: (stream) => storage.stage(stream), discard: (object) => storage.discard(object) },
      // All text fields together become the package's metadata: bound what one upload can store.
      limits: { fieldSize: 64 * 1024, fields: 1000, fieldNameSize: 1024, fieldsTotal: 1024 * 1024 },
      texts: { notMultipart: "expected a multipart/form-data body", malformed: "malformed multipart/form-data", interrupted: "upload failed" },
    });
    try {
      const problem = checkUploadFields(keys, fields, staged !== undefined, ctx.config.compat.package_device_type_required);
      if (problem) throw new LabgateError("invalid", problem);
      const dir = storage.normalizeDir(fields.get(keys.storageDirectory));
      // D14: the upload scope follows the artifact's payload types, read from the stored bytes.
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
  });

  app.get("/api/v1/packages/:id", auth.management(), (c) => {
    const id = pathId(c.req.param("id"), WHAT);
    authorize(ctx.db, c.get("identity"), "package", id, "read");
    const row = getPackage(ctx.db, id);
    if (!row) throw new LabgateError("not_found", MSG_NOT_FOUND);
    return c.json(toView(row));
  });

  app.delete("/api/v1/packages/:id", auth.management(), async (c) => {
    const id = pathId(c.req.param("id"), WHAT);
    authorize(ctx.db, c.get("identity"), "package", id, "delete");
    const result = await deletePackage(ctx, storage, id, actorOf(c, ctx.clock), (tx) => deletePermissionsOf(tx, "package", id));
    if (result === "not_found") throw new LabgateError("not_found", MSG_NOT_FOUND);
    if (result === "assigned") throw new LabgateError("conflict", "delete failed, the package is assigned to at least one group");
    return c.json({});
  });

  app.get("/api/v1/packages/:id/download", auth.management(), (c) => {
    const id = pathId(c.req.param("id"), WHAT);
    authorize(ctx.db, c.get("identity"), "package", id, "read");
    const row = getPackage(ctx.db, id);
    if (!row) throw new LabgateError("not_found", MSG_NOT_FOUND);
    return c.json({ id: row.id, download_url: signedObjectUrl(ctx, publicBase(ctx, c), row.storage_name) });
  });

  return app;
}
