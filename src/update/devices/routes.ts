import { Hono, type Context } from "hono";
import * as z from "zod";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { errors, jsonBody, ok, queryOf, route, onObject } from "../../http/openapi.ts";
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
  validTag,
  type DeviceRow,
  type DevicePresence,
} from "./devices.ts";
import { authorize, grantGuard, permissionFilter, type SqlFilter } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { Device, DeviceListQuery, DeviceRename, DeviceV1, FleetVersions, Tags } from "./schema.ts";
import { fleetVersions } from "./versions.ts";

const NOT_FOUND = "device does not exist";
const TOTAL = { "X-Total-Count": "with limit, offset or q: how many devices match before paging" };
const { 400: e400, 401: e401, 403: e403 } = errors;
const write = { 400: e400, ...onObject };

/** Devices v2 and v1, and tags. */
export function devicesRoutes(ctx: AppContext, auth: Auth, hooks: DeviceHooks, presence: DevicePresence): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();
  const tag = "devices";

  const view = (row: DeviceRow): Device => toV2(db, row, presence.isConnected(row.mac_address));
  const deviceOr404 = (id: number) => {
    const row = getDevice(db, id);
    if (!row) throw new LabgateError("not_found", NOT_FOUND);
    return row;
  };
  const tagParam = (text: string | undefined) => {
    if (text === undefined || !validTag(text)) throw new LabgateError("invalid", "a tag is 1 to 128 characters without slashes or control characters");
    return text;
  };

  /**
   * A device list: every device `filter` lets through, or with `limit`, `offset` or `q` that
   * page of the matches and the header X-Total-Count (the console's list at 10,000 devices).
   */
  const deviceList = (c: Context<AppEnv>, filter: SqlFilter | undefined, shape: (row: DeviceRow) => Device | DeviceV1) => {
    const query = queryOf(c, DeviceListQuery);
    const order = { sort: query.sort, descending: query.order === "desc", prefix: ctx.config.prefix };
    if (query.limit === undefined && query.offset === undefined && query.q === undefined) return c.json(listDevices(db, filter, undefined, order).map(shape));
    const where = bothFilters(filter, query.q === undefined ? undefined : deviceTextFilter(ctx.config.prefix, query.q));
    c.header("X-Total-Count", String(countDevices(db, where)));
    return c.json(listDevices(db, where, { limit: query.limit, offset: query.offset }, order).map(shape));
  };

  // v2: any management token; the permission table decides.
  route(
    app,
    {
      method: "get",
      path: "/api/v2/devices",
      tag,
      access: "management",
      summary: "Devices the caller may read (paged with limit/offset/q: X-Total-Count; ordered by sort/order)",
      query: DeviceListQuery,
      responses: { 200: { ...ok(z.array(Device), "OK"), headers: TOTAL }, 400: e400, 401: e401 },
    },
    mgmt,
    (c) => deviceList(c, permissionFilter(c.get("identity"), "device", "d"), view),
  );

  route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/versions",
      tag,
      access: "management",
      summary: "Which software versions the devices the caller may read run, per device type and per group (groups the caller may read)",
      responses: { 200: ok(FleetVersions, "OK"), 401: e401 },
    },
    mgmt,
    (c) => {
      const identity = c.get("identity");
      return c.json(fleetVersions(db, ctx.config.prefix, permissionFilter(identity, "device", "d"), permissionFilter(identity, "group", "g")));
    },
  );

  route(app, { method: "get", path: "/api/v2/devices/:id{[0-9]+}", tag, access: "management", summary: "One device", responses: { 200: ok(Device, "OK"), ...onObject } }, mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    return c.json(view(deviceOr404(id)));
  });

  route(
    app,
    { method: "delete", path: "/api/v2/devices/:id{[0-9]+}", tag, access: "management", summary: "Delete a device and what depends on it", responses: { 200: ok(), ...onObject } },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      authorize(db, c.get("identity"), "device", id, "delete");
      if (!(await deleteDevice(db, hooks, id, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json({});
    },
  );

  // Renaming and tagging need update, and may grant no one a permission the caller lacks (permissions.ts).
  route(
    app,
    {
      method: "patch",
      path: "/api/v2/devices/:id{[0-9]+}",
      tag,
      access: "management",
      summary: "Rename a device (needs update, and every permission the new name would grant anyone)",
      body: { json: DeviceRename },
      responses: { 200: ok(Device, "OK"), ...write },
    },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      const identity = c.get("identity");
      authorize(db, identity, "device", id, "update");
      const { name } = await jsonBody(c, DeviceRename);
      if (!(await renameDevice(db, id, name, grantGuard(identity, [{ resource: "device", id }]), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json(view(deviceOr404(id)));
    },
  );

  route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/:id{[0-9]+}/tag/:tag",
      tag,
      access: "management",
      summary: "Tag a device (needs update, and every permission the tag would grant anyone)",
      responses: { 200: ok(), ...write },
    },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      const identity = c.get("identity");
      authorize(db, identity, "device", id, "update");
      const name = tagParam(c.req.param("tag"));
      if (!(await addTag(db, id, name, grantGuard(identity, [{ resource: "device", id }]), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json({});
    },
  );

  // Tag removal (labgate's), idempotent like assignment.
  route(app, { method: "delete", path: "/api/v2/devices/:id{[0-9]+}/tag/:tag", tag, access: "management", summary: "Untag a device", responses: { 200: ok(), ...write } }, mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "update");
    const name = tagParam(c.req.param("tag"));
    if (!(await removeTag(db, id, name, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
    return c.json({});
  });

  route(app, { method: "get", path: "/api/v2/devices/:id{[0-9]+}/tags", tag, access: "management", summary: "A device's tags", responses: { 200: ok(Tags, "OK"), ...onObject } }, mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorize(db, c.get("identity"), "device", id, "read");
    deviceOr404(id);
    return c.json(deviceTags(db, id));
  });

  route(app, { method: "get", path: "/api/v2/tags/:tag", tag, access: "management", summary: "Devices with a tag", responses: { 200: ok(z.array(Device), "OK"), 400: e400, 401: e401 } }, mgmt, (c) => {
    const name = tagParam(c.req.param("tag"));
    const filter = permissionFilter(c.get("identity"), "device", "d");
    const where = {
      sql: `EXISTS (SELECT 1 FROM device_tags t WHERE t.device_id = d.id AND t.tag = ?)${filter ? ` AND ${filter.sql}` : ""}`,
      params: [name, ...(filter?.params ?? [])],
    };
    return c.json(listDevices(db, where).map(view));
  });

  // v1: scope-checked, no per-user filtering.
  route(
    app,
    {
      method: "get",
      path: "/api/v1/devices",
      tag,
      access: "management",
      summary: "All devices (v1; paged with limit/offset/q: X-Total-Count)",
      query: DeviceListQuery,
      responses: { 200: { ...ok(z.array(DeviceV1), "OK"), headers: TOTAL }, 400: e400, 401: e401, 403: e403 },
    },
    auth.management("admin_ro"),
    (c) => deviceList(c, undefined, (row) => toV1(db, row)),
  );

  route(
    app,
    { method: "get", path: "/api/v1/devices/:id{[0-9]+}", tag, access: "management", summary: "One device (v1)", responses: { 200: ok(DeviceV1, "OK"), ...onObject } },
    auth.management("admin_ro"),
    (c) => {
      const id = pathId(c.req.param("id"), "device");
      return c.json(toV1(db, deviceOr404(id)));
    },
  );

  route(
    app,
    { method: "delete", path: "/api/v1/devices/:id{[0-9]+}", tag, access: "management", summary: "Delete a device (v1)", responses: { 200: ok(), ...onObject } },
    auth.management("admin_rw"),
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      if (!(await deleteDevice(db, hooks, id, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json({});
    },
  );

  return app;
}
