import { Hono, type Context } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import * as z from "zod";
import { errors, jsonBody, ok, onObject, route } from "../../http/openapi.ts";
import { LabgateError } from "../../util/errors.ts";
import type { AppContext, AppEnv, Identity } from "../../app/context.ts";
import {
  allowed,
  authorize,
  bypasses,
  deletePermissionsOf,
  grantCreator,
  grantGuard,
  MSG_FORBIDDEN,
  permissionFilter,
  unguarded,
  type ChangeGuard,
} from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { Group, GroupCreate, GroupCreateV1, GroupDevices, GroupDevicesAdded, GroupDevicesMatching, GroupPackages, GroupPolicy, GroupPriority, GroupV1, GROUP_MATCH_MAX } from "./schema.ts";
import { bothFilters, deviceTextFilter } from "../devices/devices.ts";
import {
  createGroup,
  deleteGroup,
  getGroup,
  GROUP_NOT_FOUND,
  listGroups,
  matchingNonMembers,
  patchGroupDevices,
  setGroupPackages,
  setGroupPolicy,
  setGroupPriority,
  toV1,
  toV2,
  type CatalogWatch,
  type MembershipRule,
} from "./groups.ts";
import { parsePolicy } from "./policy.ts";
import { dateOf } from "../../util/time.ts";

const { 400: e400, 401: e401, 403: e403, 409: e409 } = errors;
const invalid = { 400: e400, ...onObject };
const tag = "groups";

/**
 * Group permissions reach the group's devices, so putting a device into a group needs `update`
 * on it, and (the guard it returns, run with the change) every permission the group's holders
 * would gain on it. Packages: assignPackages (groups.ts) checks the same for every route.
 */
function requireOnEach(ctx: AppContext, identity: Identity, ids: number[]): ChangeGuard {
  if (bypasses(identity, "update")) return unguarded;
  for (const id of ids) if (!allowed(ctx.db, identity, "device", id, "update")) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: device ${id}`);
  return grantGuard(identity, ids.map((id) => ({ resource: "device", id })));
}

/**
 * The handlers v1 and v2 share (each router registers them on its own paths); `v2` adds per-user
 * permissions and the escalation checks.
 */
function sharedHandlers(ctx: AppContext, catalog: CatalogWatch, mode: { v2: boolean; rule: MembershipRule }) {
  const { db } = ctx;
  const check = (c: Context<AppEnv>, id: number, perm: "read" | "update" | "delete") => {
    if (mode.v2) authorize(db, c.get("identity"), "group", id, perm);
  };

  const get = (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "read");
    const row = getGroup(db, id);
    if (!row) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    return c.json(mode.v2 ? toV2(db, row) : toV1(db, row));
  };

  const remove = async (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "delete");
    await deleteGroup(db, catalog, id, actorOf(c, ctx.clock), (tx) => deletePermissionsOf(tx, "group", id));
    return c.json({});
  };

  const devices = async (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "update");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const { add, remove } = await jsonBody(c, GroupDevices);
    const guard = mode.v2 ? requireOnEach(ctx, c.get("identity"), add) : unguarded;
    await patchGroupDevices(db, catalog, id, add, remove, mode.rule, actorOf(c, ctx.clock), guard);
    return c.json({});
  };

  const packages = async (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "update");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const { packages } = await jsonBody(c, GroupPackages);
    await setGroupPackages(db, catalog, id, packages, c.get("identity"), actorOf(c, ctx.clock));
    return c.json({});
  };

  const policy = async (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "update");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const body = await jsonBody(c, GroupPolicy);
    const policy = parsePolicy(body.policy);
    if (typeof policy === "string") throw new LabgateError("invalid", policy);
    await setGroupPolicy(db, catalog, id, body.policy, actorOf(c, ctx.clock));
    return c.json({});
  };

  return { get, remove, devices, packages, policy };
}

/** The operations v1 and v2 share (each router registers them on its own paths, written out whole). */
const shared = (version: "v1" | "v2") => {
  const access = "management";
  return {
    get: { tag, access, summary: `One group (${version})`, responses: { 200: ok(version === "v2" ? Group : GroupV1, "OK"), ...onObject } },
    remove: { tag, access, summary: `Delete a group (${version})`, responses: { 200: ok(), ...onObject, 409: e409 } },
    devices: { tag, access, summary: `Add and remove member devices (${version})`, body: { json: GroupDevices }, responses: { 200: ok(), ...invalid, 409: e409 } },
    packages: { tag, access, summary: `Set the group's packages (${version})`, body: { json: GroupPackages }, responses: { 200: ok(), ...invalid, 409: e409 } },
    policy: { tag, access, summary: `Set the update policy (${version})`, body: { json: GroupPolicy }, responses: { 200: ok(), ...invalid } },
  } as const;
};

/** Groups v2: any management token, decided by per-user permissions; create needs a scope. */
export function groupsV2Routes(ctx: AppContext, auth: Auth, catalog: CatalogWatch): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  route(
    app,
    {
      method: "post",
      path: "/api/v2/groups",
      tag,
      access: "management",
      summary: "Create a group (v2; needs create_group)",
      body: { json: GroupCreate },
      responses: { 200: ok(Group, "OK"), ...invalid, 409: e409 },
    },
    auth.management("create_group"),
    async (c) => {
      const identity = c.get("identity");
      const body = await jsonBody(c, GroupCreate);
      const row = await createGroup(
        db,
        {
          metadata: body.metadata,
          prefix: ctx.config.prefix,
          priority: body.priority ?? undefined,
          createdBy: identity.kind === "mgmt" ? identity.user : null,
          onCreated: (tx, id) => grantCreator(tx, identity, "group", id, dateOf(ctx.clock)),
        },
        dateOf(ctx.clock),
        actorOf(c, ctx.clock),
      );
      const view: Group = toV2(db, row);
      return c.json(view);
    },
  );

  route(app, { method: "get", path: "/api/v2/groups", tag, access: "management", summary: "Groups the caller may read (v2)", responses: { 200: ok(z.array(Group), "OK"), 401: e401 } }, mgmt, (c) =>
    c.json(listGroups(db, permissionFilter(c.get("identity"), "group", "g")).map((row): Group => toV2(db, row))),
  );

  route(
    app,
    {
      method: "post",
      path: "/api/v2/groups/:id/priority",
      tag,
      access: "management",
      summary: "Set the group's priority",
      body: { json: GroupPriority },
      responses: { 200: ok(), ...invalid, 409: e409 },
    },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "group");
      authorize(db, c.get("identity"), "group", id, "update");
      if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
      const { priority } = await jsonBody(c, GroupPriority);
      await setGroupPriority(db, catalog, id, priority, actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  const handlers = sharedHandlers(ctx, catalog, { v2: true, rule: "priority" });
  const op = shared("v2");
  route(app, { method: "get", path: "/api/v2/groups/:id", ...op.get }, mgmt, handlers.get);
  route(app, { method: "delete", path: "/api/v2/groups/:id", ...op.remove }, mgmt, handlers.remove);
  route(app, { method: "patch", path: "/api/v2/groups/:id/devices", ...op.devices }, mgmt, handlers.devices);
  route(
    app,
    {
      method: "post",
      path: "/api/v2/groups/:id/devices/matching",
      tag,
      access: "management",
      summary: `Add every device the caller may read that matches a filter (at most ${GROUP_MATCH_MAX}), with the checks of adding each one`,
      body: { json: GroupDevicesMatching },
      responses: { 200: ok(GroupDevicesAdded, "OK"), ...invalid, 409: e409 },
    },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "group");
      const identity = c.get("identity");
      authorize(db, identity, "group", id, "update");
      if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
      const { q } = await jsonBody(c, GroupDevicesMatching);
      const where = bothFilters(permissionFilter(identity, "device", "d"), deviceTextFilter(ctx.config.prefix, q))!;
      const add = matchingNonMembers(db, id, where, GROUP_MATCH_MAX);
      // As PATCH .../devices with these additions: update on each, no permission gained beyond the caller's, the membership rule.
      await patchGroupDevices(db, catalog, id, add, [], "priority", actorOf(c, ctx.clock), requireOnEach(ctx, identity, add));
      const answer: GroupDevicesAdded = { added: add.length };
      return c.json(answer);
    },
  );
  route(app, { method: "post", path: "/api/v2/groups/:id/package", ...op.packages }, mgmt, handlers.packages);
  route(app, { method: "post", path: "/api/v2/groups/:id/policy", ...op.policy }, mgmt, handlers.policy);
  return app;
}

/** Groups v1: admin scopes only, flat metadata body, no priority, one group per device. */
export function groupsV1Routes(ctx: AppContext, auth: Auth, catalog: CatalogWatch): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const read = auth.management("admin_ro");
  const write = auth.management("admin_rw");

  route(
    app,
    {
      method: "post",
      path: "/api/v1/groups",
      tag,
      access: "management",
      summary: "Create a group (v1: the body is its metadata)",
      body: { json: GroupCreateV1 },
      responses: { 200: ok(GroupV1, "OK"), ...invalid, 409: e409 },
    },
    write,
    async (c) => {
      const row = await createGroup(db, { metadata: await jsonBody(c, GroupCreateV1), prefix: ctx.config.prefix, createdBy: null }, dateOf(ctx.clock), actorOf(c, ctx.clock));
      const view: GroupV1 = toV1(db, row);
      return c.json(view);
    },
  );

  route(app, { method: "get", path: "/api/v1/groups", tag, access: "management", summary: "Groups (v1)", responses: { 200: ok(z.array(GroupV1), "OK"), 401: e401, 403: e403 } }, read, (c) =>
    c.json(listGroups(db).map((row): GroupV1 => toV1(db, row))),
  );

  const handlers = sharedHandlers(ctx, catalog, { v2: false, rule: "single" });
  const op = shared("v1");
  route(app, { method: "get", path: "/api/v1/groups/:id", ...op.get }, read, handlers.get);
  route(app, { method: "delete", path: "/api/v1/groups/:id", ...op.remove }, write, handlers.remove);
  route(app, { method: "patch", path: "/api/v1/groups/:id/devices", ...op.devices }, write, handlers.devices);
  route(app, { method: "post", path: "/api/v1/groups/:id/package", ...op.packages }, write, handlers.packages);
  route(app, { method: "post", path: "/api/v1/groups/:id/policy", ...op.policy }, write, handlers.policy);
  return app;
}
