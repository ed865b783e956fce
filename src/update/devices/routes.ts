import { Hono } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../server/context.ts";
import { httpError } from "../../http/errors.ts";
import { addTag, deleteDevice, deviceTags, getDevice, listDevices, removeTag, toV1, toV2, validTag } from "./devices.ts";
import { authorize, permissionFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";

const NOT_FOUND = "device does not exist";

/** Devices v2 and v1, and tags (update-server.md 7). */
export function devicesRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const deviceOr404 = (id: number) => {
    const row = getDevice(db, id);
    if (!row) throw httpError(404, NOT_FOUND);
    return row;
  };
  const tagParam = (text: string) => {
    if (!validTag(text)) throw httpError(400, "a tag is 1 to 128 characters without slashes or control characters");
    return text;
  };

  // v2: any management token; the permission table decides (2.7).
  app.get("/api/v2/devices", mgmt, (c) => {
    const rows = listDevices(db, permissionFilter(c.get("identity"), "device", "d"));
    return c.json(rows.map((row) => toV2(db, row)));
  });

  app.get("/api/v2/devices/:id{[0-9]+}", mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    return c.json(toV2(db, deviceOr404(id)));
  });

  app.delete("/api/v2/devices/:id{[0-9]+}", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "delete");
    if (!(await deleteDevice(db, id))) throw httpError(404, NOT_FOUND);
    return c.json({});
  });

  app.post("/api/v2/devices/:id{[0-9]+}/tag/:tag", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "update");
    const tag = tagParam(c.req.param("tag"));
    if (!(await addTag(db, id, tag))) throw httpError(404, NOT_FOUND);
    return c.json({});
  });

  // Beyond the seed (section 17.19): tag removal, idempotent like assignment.
  app.delete("/api/v2/devices/:id{[0-9]+}/tag/:tag", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "update");
    const tag = tagParam(c.req.param("tag"));
    if (!(await removeTag(db, id, tag))) throw httpError(404, NOT_FOUND);
    return c.json({});
  });

  app.get("/api/v2/devices/:id{[0-9]+}/tags", mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    deviceOr404(id);
    return c.json(deviceTags(db, id));
  });

  app.get("/api/v2/tags/:tag", mgmt, (c) => {
    const tag = tagParam(c.req.param("tag"));
    const filter = permissionFilter(c.get("identity"), "device", "d");
    const where = {
      sql: `EXISTS (SELECT 1 FROM device_tags t WHERE t.device_id = d.id AND t.tag = ?)${filter ? ` AND ${filter.sql}` : ""}`,
      params: [tag, ...(filter?.params ?? [])],
    };
    return c.json(listDevices(db, where).map((row) => toV2(db, row)));
  });

  // v1: scope-checked, no per-user filtering (7.4).
  app.get("/api/v1/devices", auth.management("admin_ro"), (c) => c.json(listDevices(db).map((row) => toV1(db, row))));

  app.get("/api/v1/devices/:id{[0-9]+}", auth.management("admin_ro"), (c) => {
    const id = pathId(c.req.param("id"), "device");
    return c.json(toV1(db, deviceOr404(id)));
  });

  app.delete("/api/v1/devices/:id{[0-9]+}", auth.management("admin_rw"), async (c) => {
    const id = pathId(c.req.param("id"), "device");
    if (!(await deleteDevice(db, id))) throw httpError(404, NOT_FOUND);
    return c.json({});
  });

  return app;
}
