import { Hono } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import * as z from "zod";
import { errors, ok, objectRefusals, route, routes } from "../../http/openapi.ts";
import { LabgateError } from "../../util/errors.ts";
import { bypasses } from "./permissions.ts";
import { checkPermission, createPermission, deletePermission, getPermission, listPermissions } from "./store.ts";
import { NamedPermission, PermissionCreate, PermissionListQuery, PermissionObject } from "./schema.ts";
import { targetNames } from "../names.ts";
import { pathId } from "../validation.ts";
import { dateOf } from "../../util/time.ts";

const tag = "permissions";

/** The permission table. */
export function permissionsRoutes(ctx: AppContext, auth: Auth) {
  const { store } = ctx;
  const app = new Hono<AppEnv>();

  const postPermissions = route(
    app,
    {
      method: "post",
      path: "/api/v1/permissions",
      tag,
      access: "management",
      summary: "Grant a permission",
      body: { json: PermissionCreate },
      responses: { 200: ok(PermissionObject, "OK"), 400: errors[400], ...objectRefusals, 409: errors[409], 422: errors[422] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const permission = checkPermission(body);
      return c.json(await createPermission(store, permission, dateOf(ctx.clock), actorOf(c, ctx.clock)));
    },
  );

  // Any management identity: admins see every row, everyone else their own.
  const getPermissions = route(
    app,
    {
      method: "get",
      path: "/api/v1/permissions",
      tag,
      access: "management",
      summary: "Permissions (admins: all; others: their own); names=true adds what each is on by name",
      query: PermissionListQuery,
      responses: { 200: ok(z.array(z.union([PermissionObject, NamedPermission])), "OK"), 400: errors[400], 401: errors[401] },
    },
    auth.management(),
    async (c, { query }) => {
      const identity = c.get("identity");
      const user = bypasses(identity, "read") || identity.kind !== "mgmt" ? undefined : identity.user;
      const list = await listPermissions(store.query, user);
      if (!query.names) return c.json(list);
      const names = await targetNames(store.query, ctx.config.prefix, list.map((p) => `${p.resource}:${p.resource_id}`));
      return c.json(list.map((p): NamedPermission => ({ ...p, resource_label: names.get(`${p.resource}:${p.resource_id}`) ?? null })));
    },
  );

  const getPermissionsById = route(
    app,
    { method: "get", path: "/api/v1/permissions/:id{[0-9]+}", tag, access: "management", summary: "One permission", responses: { 200: ok(PermissionObject, "OK"), ...objectRefusals } },
    auth.management("admin_rw"),
    async (c) => {
      const found = await getPermission(store.query, pathId(c.req.param("id"), "resource"));
      if (!found) throw new LabgateError("not_found", "resource does not exist");
      return c.json(found);
    },
  );

  const deletePermissionsById = route(
    app,
    { method: "delete", path: "/api/v1/permissions/:id{[0-9]+}", tag, access: "management", summary: "Revoke a permission", responses: { 200: ok(), ...objectRefusals } },
    auth.management("admin_rw"),
    async (c) => {
      if (!(await deletePermission(store, pathId(c.req.param("id"), "permission"), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", "permission does not exist");
      return c.json({});
    },
  );

  return routes(app, postPermissions, getPermissions, getPermissionsById, deletePermissionsById);
}
