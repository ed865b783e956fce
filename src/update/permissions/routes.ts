import { Hono } from "hono";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { jsonBody } from "../../http/openapi.ts";
import { LabgateError } from "../../util/errors.ts";
import { bypasses } from "./permissions.ts";
import { checkPermission, createPermission, deletePermission, getPermission, listPermissions, permissionBody } from "./store.ts";
import { pathId } from "../validation.ts";
import { dateOf } from "../../util/time.ts";

/** The permission table. */
export function permissionsRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();

  app.post("/api/v1/permissions", auth.management("admin_rw"), async (c) => {
    const permission = checkPermission(await jsonBody(c, permissionBody));
    return c.json(await createPermission(db, permission, dateOf(ctx.clock), actorOf(c, ctx.clock)));
  });

  // Any management identity: admins see every row, everyone else their own.
  app.get("/api/v1/permissions", auth.management(), (c) => {
    const identity = c.get("identity");
    const user = bypasses(identity, "read") || identity.kind !== "mgmt" ? undefined : identity.user;
    return c.json(listPermissions(db, user));
  });

  app.get("/api/v1/permissions/:id{[0-9]+}", auth.management("admin_rw"), (c) => {
    const found = getPermission(db, pathId(c.req.param("id"), "resource"));
    if (!found) throw new LabgateError("not_found", "resource does not exist");
    return c.json(found);
  });

  app.delete("/api/v1/permissions/:id{[0-9]+}", auth.management("admin_rw"), async (c) => {
    if (!(await deletePermission(db, pathId(c.req.param("id"), "permission"), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", "permission does not exist");
    return c.json({});
  });

  return app;
}
