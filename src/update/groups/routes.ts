import { Hono, type Context } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import * as z from "zod";
import { errors, ok, objectRefusals, route, routes, type RouteHandler } from "../../http/openapi.ts";
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
  type GroupRow,
  type MembershipRule,
} from "./groups.ts";
import { parsePolicy } from "./policy.ts";
import { dateOf } from "../../util/time.ts";

const invalid = { 400: errors[400], ...objectRefusals };
const tag = "groups";

/**
 * Group permissions reach the group's devices, so putting a device into a group needs `update`
 * on it, and (the guard it returns, run with the change) every permission the group's holders
 * would gain on it. Packages: assignPackages (groups.ts) checks the same for every route.
 */
async function requireOnEach(ctx: AppContext, identity: Identity, ids: number[]): Promise<ChangeGuard> {
  if (bypasses(identity, "update")) return unguarded;
  for (const id of ids) if (!(await allowed(ctx.store.query, identity, "device", id, "update"))) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: device ${id}`);
  return grantGuard(identity, ids.map((id) => ({ resource: "device", id })));
}

/**
 * The handlers v1 and v2 share (each router registers them on its own paths); `v2` adds per-user
 * permissions and the escalation checks.
 */
function sharedHandlers(ctx: AppContext, catalog: CatalogWatch, mode: { v2: boolean; rule: MembershipRule }) {
  const { store } = ctx;
  const q = store.query;
  type Handler<K extends keyof Shared<View>> = RouteHandler<AppEnv, Shared<View>[K]>;
  const check = async (c: Context<AppEnv>, id: number, perm: "read" | "update" | "delete") => {
    if (mode.v2) await authorize(q, c.get("identity"), "group", id, perm);
  };

  /** The group of the path, for its version's view (each router answers its own). */
  const get = async (c: Context<AppEnv>): Promise<GroupRow> => {
    const id = pathId(c.req.param("id"), "group");
    await check(c, id, "read");
    const row = await getGroup(q, id);
    if (!row) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    return row;
  };

  const remove: Handler<"remove"> = async (c) => {
    const id = pathId(c.req.param("id"), "group");
    await check(c, id, "delete");
    await deleteGroup(store, catalog, id, actorOf(c, ctx.clock), (tx) => deletePermissionsOf(tx, "group", id));
    return c.json({});
  };

  const devices: Handler<"devices"> = async (c, { body: { add, remove } }) => {
    const id = pathId(c.req.param("id"), "group");
    await check(c, id, "update");
    if (!(await getGroup(q, id))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const guard = mode.v2 ? await requireOnEach(ctx, c.get("identity"), add) : unguarded;
    await patchGroupDevices(store, catalog, id, add, remove, mode.rule, actorOf(c, ctx.clock), guard);
    return c.json({});
  };

  const packages: Handler<"packages"> = async (c, { body: { packages } }) => {
    const id = pathId(c.req.param("id"), "group");
    await check(c, id, "update");
    if (!(await getGroup(q, id))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    await setGroupPackages(store, catalog, id, packages, c.get("identity"), actorOf(c, ctx.clock));
    return c.json({});
  };

  const policy: Handler<"policy"> = async (c, { body }) => {
    const id = pathId(c.req.param("id"), "group");
    await check(c, id, "update");
    if (!(await getGroup(q, id))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const policy = parsePolicy(body.policy);
    if (typeof policy === "string") throw new LabgateError("invalid", policy);
    await setGroupPolicy(store, catalog, id, body.policy, actorOf(c, ctx.clock));
    return c.json({});
  };

  return { get, remove, devices, packages, policy };
}

/** A group as each version shows it. */
type View = typeof Group | typeof GroupV1;
type Shared<V extends View> = ReturnType<typeof shared<V>>;

/** The operations v1 and v2 share (each router registers them on its own paths, written out whole). */
const shared = <V extends View>(version: "v1" | "v2", view: V) => {
  const access = "management";
  return {
    get: { tag, access, summary: `One group (${version})`, responses: { 200: { description: "OK", json: view }, ...objectRefusals } },
    remove: { tag, access, summary: `Delete a group (${version})`, responses: { 200: ok(), ...objectRefusals, 409: errors[409] } },
    devices: { tag, access, summary: `Add and remove member devices (${version})`, body: { json: GroupDevices }, responses: { 200: ok(), ...invalid, 409: errors[409] } },
    packages: { tag, access, summary: `Set the group's packages (${version})`, body: { json: GroupPackages }, responses: { 200: ok(), ...invalid, 409: errors[409] } },
    policy: { tag, access, summary: `Set the update policy (${version})`, body: { json: GroupPolicy }, responses: { 200: ok(), ...invalid } },
  } as const;
};

/** Groups v2: any management token, decided by per-user permissions; create needs a scope. */
export function groupsV2Routes(ctx: AppContext, auth: Auth, catalog: CatalogWatch) {
  const { store } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const create = route(
    app,
    {
      method: "post",
      path: "/api/v2/groups",
      tag,
      access: "management",
      summary: "Create a group (v2; needs create_group)",
      body: { json: GroupCreate },
      responses: { 200: ok(Group, "OK"), ...invalid, 409: errors[409] },
    },
    auth.management("create_group"),
    async (c, { body }) => {
      const identity = c.get("identity");
      const row = await createGroup(
        store,
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
      const view: Group = await toV2(store.query, row);
      return c.json(view);
    },
  );

  const list = route(app, { method: "get", path: "/api/v2/groups", tag, access: "management", summary: "Groups the caller may read (v2)", responses: { 200: ok(z.array(Group), "OK"), 401: errors[401] } }, mgmt, async (c) => {
    const rows = await listGroups(store.query, permissionFilter(c.get("identity"), "group", "g"));
    const list: Group[] = [];
    for (const row of rows) list.push(await toV2(store.query, row));
    return c.json(list);
  });

  const priority = route(
    app,
    {
      method: "post",
      path: "/api/v2/groups/:id/priority",
      tag,
      access: "management",
      summary: "Set the group's priority",
      body: { json: GroupPriority },
      responses: { 200: ok(), ...invalid, 409: errors[409] },
    },
    mgmt,
    async (c, { body: { priority } }) => {
      const id = pathId(c.req.param("id"), "group");
      await authorize(store.query, c.get("identity"), "group", id, "update");
      if (!(await getGroup(store.query, id))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
      await setGroupPriority(store, catalog, id, priority, actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  const handlers = sharedHandlers(ctx, catalog, { v2: true, rule: "priority" });
  const op = shared("v2", Group);
  const get = route(app, { method: "get", path: "/api/v2/groups/:id", ...op.get }, mgmt, async (c) => c.json(await toV2(store.query, await handlers.get(c))));
  const remove = route(app, { method: "delete", path: "/api/v2/groups/:id", ...op.remove }, mgmt, handlers.remove);
  const devices = route(app, { method: "patch", path: "/api/v2/groups/:id/devices", ...op.devices }, mgmt, handlers.devices);
  const matching = route(
    app,
    {
      method: "post",
      path: "/api/v2/groups/:id/devices/matching",
      tag,
      access: "management",
      summary: `Add every device the caller may read that matches a filter (at most ${GROUP_MATCH_MAX}), with the checks of adding each one`,
      body: { json: GroupDevicesMatching },
      responses: { 200: ok(GroupDevicesAdded, "OK"), ...invalid, 409: errors[409] },
    },
    mgmt,
    async (c, { body: { q } }) => {
      const id = pathId(c.req.param("id"), "group");
      const identity = c.get("identity");
      await authorize(store.query, identity, "group", id, "update");
      if (!(await getGroup(store.query, id))) throw new LabgateError("not_found", GROUP_NOT_FOUND);
      const where = bothFilters(permissionFilter(identity, "device", "d"), deviceTextFilter(ctx.config.prefix, q, store.engine))!;
      const add = await matchingNonMembers(store.query, id, where, GROUP_MATCH_MAX);
      // As PATCH .../devices with these additions: update on each, no permission gained beyond the caller's, the membership rule.
      await patchGroupDevices(store, catalog, id, add, [], "priority", actorOf(c, ctx.clock), await requireOnEach(ctx, identity, add));
      const answer: GroupDevicesAdded = { added: add.length };
      return c.json(answer);
    },
  );
  const packages = route(app, { method: "post", path: "/api/v2/groups/:id/package", ...op.packages }, mgmt, handlers.packages);
  const policy = route(app, { method: "post", path: "/api/v2/groups/:id/policy", ...op.policy }, mgmt, handlers.policy);
  return routes(app, create, list, priority, get, remove, devices, matching, packages, policy);
}

/** Groups v1: admin scopes only, flat metadata body, no priority, one group per device. */
export function groupsV1Routes(ctx: AppContext, auth: Auth, catalog: CatalogWatch): Hono<AppEnv> {
  const { store } = ctx;
  const q = store.query;
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
      responses: { 200: ok(GroupV1, "OK"), ...invalid, 409: errors[409] },
    },
    write,
    async (c, { body }) => {
      const row = await createGroup(store, { metadata: body, prefix: ctx.config.prefix, createdBy: null }, dateOf(ctx.clock), actorOf(c, ctx.clock));
      const view: GroupV1 = await toV1(q, row);
      return c.json(view);
    },
  );

  route(app, { method: "get", path: "/api/v1/groups", tag, access: "management", summary: "Groups (v1)", responses: { 200: ok(z.array(GroupV1), "OK"), 401: errors[401], 403: errors[403] } }, read, async (c) => {
    const list: GroupV1[] = [];
    for (const row of await listGroups(q)) list.push(await toV1(q, row));
    return c.json(list);
  });

  const handlers = sharedHandlers(ctx, catalog, { v2: false, rule: "single" });
  const op = shared("v1", GroupV1);
  route(app, { method: "get", path: "/api/v1/groups/:id", ...op.get }, read, async (c) => c.json(await toV1(q, await handlers.get(c))));
  route(app, { method: "delete", path: "/api/v1/groups/:id", ...op.remove }, write, handlers.remove);
  route(app, { method: "patch", path: "/api/v1/groups/:id/devices", ...op.devices }, write, handlers.devices);
  route(app, { method: "post", path: "/api/v1/groups/:id/package", ...op.packages }, write, handlers.packages);
  route(app, { method: "post", path: "/api/v1/groups/:id/policy", ...op.policy }, write, handlers.policy);
  return app;
}
