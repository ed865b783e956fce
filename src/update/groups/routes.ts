import { Hono, type Context } from "hono";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import * as z from "zod";
import { jsonBody, jsonObject } from "../../http/openapi.ts";
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
import { pathId, strictBody, zId, zInteger } from "../validation.ts";
import {
  createGroup,
  deleteGroup,
  getGroup,
  GROUP_NOT_FOUND,
  groupPackageIds,
  listGroups,
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

const PRIORITY_LIMIT = 2 ** 31 - 1;

/** A priority: an integer within 32 bits (or its decimal text, as the reference reads it). */
const priority = (required: boolean) => {
  const message = 'schema validation failed: "priority" must be an integer';
  return zInteger(-PRIORITY_LIMIT, PRIORITY_LIMIT, (input) => (required && input === undefined ? 'schema validation failed: field "priority" is required' : message));
};

/** A required array of positive integer ids, each a number or its decimal text (duplicates collapse). */
const idList = (key: string) => {
  const message = `schema validation failed: field "${key}" must be an array of positive integer ids`;
  return z
    .array(zId(message), {
      error: (iss) => (iss.input === undefined ? `schema validation failed: field "${key}" is required` : message),
    })
    .transform((ids) => [...new Set(ids)]);
};

const metadataObject = z.record(z.string(), z.unknown(), {
  error: (iss) => (iss.input === undefined ? 'schema validation failed: field "metadata" is required' : 'schema validation failed: field "metadata" must be an object'),
});

// Request bodies, also shown by the OpenAPI document.
export const groupCreateV1Body = metadataObject;
export const groupCreateV2Body = z.looseObject(
  { metadata: metadataObject, priority: priority(false).nullish() },
  jsonObject,
);
export const groupDevicesBody = strictBody({ add: idList("add"), remove: idList("remove") });
export const groupPackagesBody = strictBody({ packages: idList("packages") });
export const groupPolicyBody = strictBody({
  policy: z
    .string({ error: 'schema validation failed: field "policy" must be a string' })
    .max(4096, { error: "invalid policy: longer than 4096 characters" })
    .describe("e.g. exact_match,v2 or no_update"),
});
export const groupPriorityBody = strictBody({ priority: priority(true) });

/**
 * Section 17 item 5 and issue 10: group permissions reach the group's devices and packages, so
 * putting a device or package into a group needs `update` on that object, and (the guard it
 * returns, run with the change) every permission the group's holders would gain on it.
 */
function requireOnEach(ctx: AppContext, identity: Identity, resource: "device" | "package", ids: number[]): ChangeGuard {
  if (bypasses(identity, "update")) return unguarded;
  for (const id of ids) if (!allowed(ctx.db, identity, resource, id, "update")) throw new LabgateError("forbidden", `${MSG_FORBIDDEN}: ${resource} ${id}`);
  return grantGuard(identity, ids.map((id) => ({ resource, id })));
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
    const { add, remove } = await jsonBody(c, groupDevicesBody);
    const guard = mode.v2 ? requireOnEach(ctx, c.get("identity"), "device", add) : unguarded;
    await patchGroupDevices(db, catalog, id, add, remove, mode.rule, actorOf(c, ctx.clock), guard);
    return c.json({});
  };

  const packages = async (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "update");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const { packages } = await jsonBody(c, groupPackagesBody);
    let guard = unguarded;
    if (mode.v2) {
      const current = new Set(groupPackageIds(db, id));
      guard = requireOnEach(ctx, c.get("identity"), "package", packages.filter((p) => !current.has(p)));
    }
    await setGroupPackages(db, catalog, id, packages, actorOf(c, ctx.clock), guard);
    return c.json({});
  };

  const policy = async (c: Context<AppEnv>) => {
    const id = pathId(c.req.param("id"), "group");
    check(c, id, "update");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const body = await jsonBody(c, groupPolicyBody);
    const policy = parsePolicy(body.policy);
    if (typeof policy === "string") throw new LabgateError("invalid", policy);
    await setGroupPolicy(db, catalog, id, body.policy, actorOf(c, ctx.clock));
    return c.json({});
  };

  return { get, remove, devices, packages, policy };
}

/** Groups v2: any management token, decided by per-user permissions; create needs a scope. */
export function groupsV2Routes(ctx: AppContext, auth: Auth, catalog: CatalogWatch): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  app.post("/api/v2/groups", auth.management("create_group"), async (c) => {
    const identity = c.get("identity");
    const body = await jsonBody(c, groupCreateV2Body);
    const row = await createGroup(db, {
      metadata: body.metadata,
      priority: body.priority ?? undefined,
      createdBy: identity.kind === "mgmt" ? identity.user : null,
      onCreated: (tx, id) => grantCreator(tx, identity, "group", id, dateOf(ctx.clock)),
    }, dateOf(ctx.clock), actorOf(c, ctx.clock));
    return c.json(toV2(db, row));
  });

  app.get("/api/v2/groups", mgmt, (c) => c.json(listGroups(db, permissionFilter(c.get("identity"), "group", "g")).map((row) => toV2(db, row))));

  app.post("/api/v2/groups/:id/priority", mgmt, async (c) => {
    const id = pathId(c.req.param("id"), "group");
    authorize(db, c.get("identity"), "group", id, "update");
    if (!getGroup(db, id)) throw new LabgateError("not_found", GROUP_NOT_FOUND);
    const { priority } = await jsonBody(c, groupPriorityBody);
    await setGroupPriority(db, catalog, id, priority, actorOf(c, ctx.clock));
    return c.json({});
  });

  const shared = sharedHandlers(ctx, catalog, { v2: true, rule: "priority" });
  app.get("/api/v2/groups/:id", mgmt, shared.get);
  app.delete("/api/v2/groups/:id", mgmt, shared.remove);
  app.patch("/api/v2/groups/:id/devices", mgmt, shared.devices);
  app.post("/api/v2/groups/:id/package", mgmt, shared.packages);
  app.post("/api/v2/groups/:id/policy", mgmt, shared.policy);
  return app;
}

/** Groups v1: admin scopes only, flat metadata body, no priority, one group per device. */
export function groupsV1Routes(ctx: AppContext, auth: Auth, catalog: CatalogWatch): Hono<AppEnv> {
  const { db } = ctx;
  const app = new Hono<AppEnv>();
  const read = auth.management("admin_ro");
  const write = auth.management("admin_rw");

  app.post("/api/v1/groups", write, async (c) => {
    const row = await createGroup(db, { metadata: await jsonBody(c, groupCreateV1Body), createdBy: null }, dateOf(ctx.clock), actorOf(c, ctx.clock));
    return c.json(toV1(db, row));
  });

  app.get("/api/v1/groups", read, (c) => c.json(listGroups(db).map((row) => toV1(db, row))));

  const shared = sharedHandlers(ctx, catalog, { v2: false, rule: "single" });
  app.get("/api/v1/groups/:id", read, shared.get);
  app.delete("/api/v1/groups/:id", write, shared.remove);
  app.patch("/api/v1/groups/:id/devices", write, shared.devices);
  app.post("/api/v1/groups/:id/package", write, shared.packages);
  app.post("/api/v1/groups/:id/policy", write, shared.policy);
  return app;
}
