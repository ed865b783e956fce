import { Hono, type Context } from "hono";
import { actorOf } from "../../audit/audit.ts";
import * as z from "zod";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { integerParam, queryOf } from "../../http/openapi.ts";
import {
  addTag,
  bothFilters,
  countDevices,
  deleteDevice,
  type DeviceHooks,
  deviceTags,
  deviceTextFilter,
  getDevice,
  listDevices,
  removeTag,
  renameDevice,
  toV1,
  toV2,
  validDeviceName,
  validTag,
  type DeviceRow,
  type DevicePresence,
} from "./devices.ts";
import { authorize, grantGuard, permissionFilter, type SqlFilter } from "../permissions/permissions.ts";
import { jsonBody } from "../../http/openapi.ts";
import { pathId, strictBody } from "../validation.ts";

const NOT_FOUND = "device does not exist";

/** Paging of the device lists; without any of these the lists answer as before. */
export const deviceListQuery = z.object({
  limit: integerParam("limit", 1, 1000).describe("at most this many devices (with X-Total-Count: how many match)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many of the matches (ordered by id)"),
  q: z
    .string()
    .max(256, { error: 'query parameter "q" must be at most 256 characters' })
    .optional()
    .describe("only devices with this text in their name, MAC address, id, version or device type (ignoring case)"),
});

const NAME_ERROR = "schema validation failed: field \"name\" must be 1 to 128 characters without control characters or surrounding blanks";
/** The body of PATCH /api/v2/devices/{id}: the device's new name (what device_by_tag permissions match). */
export const deviceRenameBody = strictBody({
  name: z.string({ error: NAME_ERROR }).refine(validDeviceName, { error: NAME_ERROR }).meta({ minLength: 1, maxLength: 128 }),
});

/** Devices v2 and v1, and tags. */
export function devicesRoutes(ctx: AppContext, auth: Auth, hooks: DeviceHooks, presence: DevicePresence): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const view = (row: DeviceRow) => toV2(db, row, presence.isConnected(row.mac_address));
  const deviceOr404 = (id: number) => {
    const row = getDevice(db, id);
    if (!row) throw new LabgateError("not_found", NOT_FOUND);
    return row;
  };
  const tagParam = (text: string) => {
    if (!validTag(text)) throw new LabgateError("invalid", "a tag is 1 to 128 characters without slashes or control characters");
    return text;
  };

  /**
   * A device list: every device `filter` lets through, or with `limit`, `offset` or `q` that
   * page of the matches and the header X-Total-Count (the console's list at 10,000 devices).
   */
  const deviceList = (c: Context<AppEnv>, filter: SqlFilter | undefined, shape: (row: DeviceRow) => unknown) => {
    const query = queryOf(c, deviceListQuery);
    if (query.limit === undefined && query.offset === undefined && query.q === undefined) return c.json(listDevices(db, filter).map(shape));
    const where = bothFilters(filter, query.q === undefined ? undefined : deviceTextFilter(ctx.config.prefix, query.q));
    c.header("X-Total-Count", String(countDevices(db, where)));
    return c.json(listDevices(db, where, { limit: query.limit, offset: query.offset }).map(shape));
  };

  // v2: any management token; the permission table decides.
  app.get("/api/v2/devices", mgmt, (c) => deviceList(c, permissionFilter(c.get("identity"), "device", "d"), view));

  app.get("/api/v2/devices/:id{[0-9]+}", mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    return c.json(view(deviceOr404(id)));
  });

  app.delete("/api/v2/devices/:id{[0-9]+}", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "delete");
    if (!(await deleteDevice(db, hooks, id, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
    return c.json({});
  });

  // Renaming and tagging need update, and may grant no one a permission the caller lacks (permissions.ts).
  app.patch("/api/v2/devices/:id{[0-9]+}", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    const identity = c.get("identity");
    authorize(db, identity, "device", id, "update");
    const { name } = await jsonBody(c, deviceRenameBody);
    if (!(await renameDevice(db, id, name, grantGuard(identity, [{ resource: "device", id }]), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
    return c.json(view(deviceOr404(id)));
  });

  app.post("/api/v2/devices/:id{[0-9]+}/tag/:tag", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    const identity = c.get("identity");
    authorize(db, identity, "device", id, "update");
    const tag = tagParam(c.req.param("tag"));
    if (!(await addTag(db, id, tag, grantGuard(identity, [{ resource: "device", id }]), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
    return c.json({});
  });

  // Beyond the seed: tag removal, idempotent like assignment.
  app.delete("/api/v2/devices/:id{[0-9]+}/tag/:tag", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "update");
    const tag = tagParam(c.req.param("tag"));
    if (!(await removeTag(db, id, tag, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
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
    return c.json(listDevices(db, where).map(view));
  });

  // v1: scope-checked, no per-user filtering.
  app.get("/api/v1/devices", auth.management("admin_ro"), (c) => deviceList(c, undefined, (row) => toV1(db, row)));

  app.get("/api/v1/devices/:id{[0-9]+}", auth.management("admin_ro"), (c) => {
    const id = pathId(c.req.param("id"), "device");
    return c.json(toV1(db, deviceOr404(id)));
  });

  app.delete("/api/v1/devices/:id{[0-9]+}", auth.management("admin_rw"), async (c) => {
    const id = pathId(c.req.param("id"), "device");
    if (!(await deleteDevice(db, hooks, id, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
    return c.json({});
  });

  return app;
}
