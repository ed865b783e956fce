import { Hono, type Context } from "hono";
import * as z from "zod";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { errors, ok, route, routes, objectRefusals } from "../../http/openapi.ts";
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
  taggedFilter,
  removeTag,
  renameDevice,
  toV1,
  toV2,
  validTag,
  type DeviceRow,
  type DevicePresence,
} from "./devices.ts";
import { permissionFilter, permissionFilterSql, type SqlFilter } from "../permissions/permissions.ts";
import { authorizeSync, grantGuardInWrite } from "../permissions/legacy.ts";
import { pathId } from "../validation.ts";
import { Device, DeviceListQuery, DeviceRename, DeviceV1, FleetVersions, Tags } from "./schema.ts";
import { versionsByDeviceType } from "./versions.ts";
import { versionsByGroup } from "../groups/versions.ts";

const NOT_FOUND = "device does not exist";
const TOTAL = { "X-Total-Count": "with limit, offset or q: how many devices match before paging" };
const write = { 400: errors[400], ...objectRefusals };

/** Devices v2 and v1, and tags. */
export function devicesRoutes(ctx: AppContext, auth: Auth, hooks: DeviceHooks, presence: DevicePresence) {
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
  const deviceList = <T>(c: Context<AppEnv>, query: z.output<typeof DeviceListQuery>, filter: SqlFilter | undefined, shape: (row: DeviceRow) => T): T[] => {
    const order = { sort: query.sort, descending: query.order === "desc", prefix: ctx.config.prefix };
    if (query.limit === undefined && query.offset === undefined && query.q === undefined) return listDevices(db, filter, undefined, order).map(shape);
    const where = bothFilters(filter, query.q === undefined ? undefined : deviceTextFilter(ctx.config.prefix, query.q));
    c.header("X-Total-Count", String(countDevices(db, where)));
    return listDevices(db, where, { limit: query.limit, offset: query.offset }, order).map(shape);
  };

  // v2: any management token; the permission table decides.
  const getV2Devices = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices",
      tag,
      access: "management",
      summary: "Devices the caller may read (paged with limit/offset/q: X-Total-Count; ordered by sort/order)",
      query: DeviceListQuery,
      responses: { 200: { ...ok(z.array(Device), "OK"), headers: TOTAL }, 400: errors[400], 401: errors[401] },
    },
    mgmt,
    (c, { query }) => c.json(deviceList(c, query, permissionFilterSql(c.get("identity"), "device", "d"), view)),
  );

  const getV2DevicesVersions = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/versions",
      tag,
      access: "management",
      summary: "Which software versions the devices the caller may read run, per device type and per group (groups the caller may read)",
      responses: { 200: ok(FleetVersions, "OK"), 401: errors[401] },
    },
    mgmt,
    async (c) => {
      const identity = c.get("identity");
      const devices = permissionFilterSql(identity, "device", "d");
      return c.json({ by_device_type: versionsByDeviceType(db, ctx.config.prefix, devices), by_group: await versionsByGroup(ctx.store, ctx.config.prefix, permissionFilter(identity, "group", "g"), permissionFilter(identity, "device", "d")) });
    },
  );

  const getV2DevicesById = route(app, { method: "get", path: "/api/v2/devices/:id{[0-9]+}", tag, access: "management", summary: "One device", responses: { 200: ok(Device, "OK"), ...objectRefusals } }, mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorizeSync(db, c.get("identity"), "device", id, "read");
    return c.json(view(deviceOr404(id)));
  });

  const deleteV2DevicesById = route(
    app,
    { method: "delete", path: "/api/v2/devices/:id{[0-9]+}", tag, access: "management", summary: "Delete a device and what depends on it", responses: { 200: ok(), ...objectRefusals } },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      authorizeSync(db, c.get("identity"), "device", id, "delete");
      if (!(await deleteDevice(db, hooks, id, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json({});
    },
  );

  // Renaming and tagging need update, and may grant no one a permission the caller lacks (permissions.ts).
  const patchV2DevicesById = route(
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
    async (c, { body: { name } }) => {
      const id = pathId(c.req.param("id"), "device");
      const identity = c.get("identity");
      authorizeSync(db, identity, "device", id, "update");
      if (!(await renameDevice(db, id, name, grantGuardInWrite(identity, [{ resource: "device", id }]), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json(view(deviceOr404(id)));
    },
  );

  const postV2DevicesByIdTagByTag = route(
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
      authorizeSync(db, identity, "device", id, "update");
      const name = tagParam(c.req.param("tag"));
      if (!(await addTag(db, id, name, grantGuardInWrite(identity, [{ resource: "device", id }]), actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json({});
    },
  );

  // Tag removal (labgate's), idempotent like assignment.
  const deleteV2DevicesByIdTagByTag = route(app, { method: "delete", path: "/api/v2/devices/:id{[0-9]+}/tag/:tag", tag, access: "management", summary: "Untag a device", responses: { 200: ok(), ...write } }, mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorizeSync(db, c.get("identity"), "device", id, "update");
    const name = tagParam(c.req.param("tag"));
    if (!(await removeTag(db, id, name, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
    return c.json({});
  });

  const getV2DevicesByIdTags = route(app, { method: "get", path: "/api/v2/devices/:id{[0-9]+}/tags", tag, access: "management", summary: "A device's tags", responses: { 200: ok(Tags, "OK"), ...objectRefusals } }, mgmt, (c) => {
    const id = pathId(c.req.param("id"), "device");
    authorizeSync(db, c.get("identity"), "device", id, "read");
    deviceOr404(id);
    return c.json(deviceTags(db, id));
  });

  const getV2TagsByTag = route(app, { method: "get", path: "/api/v2/tags/:tag", tag, access: "management", summary: "Devices with a tag", responses: { 200: ok(z.array(Device), "OK"), 400: errors[400], 401: errors[401] } }, mgmt, (c) => {
    const name = tagParam(c.req.param("tag"));
    const filter = permissionFilterSql(c.get("identity"), "device", "d");
    return c.json(listDevices(db, bothFilters(taggedFilter(name), filter)).map(view));
  });

  // v1: scope-checked, no per-user filtering.
  const getV1Devices = route(
    app,
    {
      method: "get",
      path: "/api/v1/devices",
      tag,
      access: "management",
      summary: "All devices (v1; paged with limit/offset/q: X-Total-Count)",
      query: DeviceListQuery,
      responses: { 200: { ...ok(z.array(DeviceV1), "OK"), headers: TOTAL }, 400: errors[400], 401: errors[401], 403: errors[403] },
    },
    auth.management("admin_ro"),
    (c, { query }) => c.json(deviceList(c, query, undefined, (row) => toV1(db, row))),
  );

  const getV1DevicesById = route(
    app,
    { method: "get", path: "/api/v1/devices/:id{[0-9]+}", tag, access: "management", summary: "One device (v1)", responses: { 200: ok(DeviceV1, "OK"), ...objectRefusals } },
    auth.management("admin_ro"),
    (c) => {
      const id = pathId(c.req.param("id"), "device");
      return c.json(toV1(db, deviceOr404(id)));
    },
  );

  const deleteV1DevicesById = route(
    app,
    { method: "delete", path: "/api/v1/devices/:id{[0-9]+}", tag, access: "management", summary: "Delete a device (v1)", responses: { 200: ok(), ...objectRefusals } },
    auth.management("admin_rw"),
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      if (!(await deleteDevice(db, hooks, id, actorOf(c, ctx.clock)))) throw new LabgateError("not_found", NOT_FOUND);
      return c.json({});
    },
  );

  return routes(app, getV2Devices, getV2DevicesVersions, getV2DevicesById, deleteV2DevicesById, patchV2DevicesById, postV2DevicesByIdTagByTag, deleteV2DevicesByIdTagByTag, getV2DevicesByIdTags, getV2TagsByTag, getV1Devices, getV1DevicesById, deleteV1DevicesById);
}
