/*
 * Type-level tests of `route` (src/http/openapi.ts), checked by `npm run typecheck`: each
 * `@ts-expect-error` marks a line that must fail to compile, so a handler that could answer what
 * its operation does not declare, or read what its schemas lack, fails the typecheck.
 */
import { Hono, type MiddlewareHandler } from "hono";
import * as z from "zod";
import type { AppEnv } from "../../src/app/context.ts";
import { errors, ok, route, routes, type OperationAt, type ReplyAt } from "../../src/http/openapi.ts";

const Thing = z.object({ id: z.int(), name: z.string() });
const auth: MiddlewareHandler<AppEnv> = async (_c, next) => next();
const app = new Hono<AppEnv>();
const rename = {
  method: "post",
  path: "/things/:id{[0-9]+}/name",
  tag: "t",
  access: "management",
  summary: "Rename",
  body: { json: z.strictObject({ name: z.string() }) },
  query: z.object({ limit: z.coerce.number().optional() }),
  responses: { 200: ok(Thing, "OK"), 404: errors[404] },
} as const;
const list = { method: "get", path: "/things", tag: "t", access: "management", summary: "List", responses: { 200: ok(z.array(Thing), "OK") } } as const;
const file = { method: "get", path: "/things/:id/file", tag: "t", access: "management", summary: "File", responses: { 200: { description: "JSON or CSV", json: Thing, media: "text/csv" } } } as const;

// The input is typed from the operation: body, query, path parameters.
const renamed = route(app, rename, auth, async (c, { body, query, params }) => {
  const limit: number | undefined = query.limit;
  // @ts-expect-error: the body schema has no field "title"
  void body.title;
  // @ts-expect-error: the path has no parameter "name"
  void params.name;
  if (limit === 1) return c.json({ error: "gone" }, 404);
  return c.json({ id: Number(params.id), name: body.name });
});

// Replies are held to the operation's responses.
// @ts-expect-error: 409 is not among the operation's replies
route(app, rename, auth, (c) => c.json({ error: "taken" }, 409));
// @ts-expect-error: the 200 reply lacks "name"
route(app, rename, auth, (c) => c.json({ id: 1 }));
// @ts-expect-error: "id" must be a number
route(app, rename, auth, (c, { params }) => c.json({ id: params.id, name: "x" }));
// @ts-expect-error: 404 answers an ErrorBody
route(app, rename, auth, (c) => c.json({ id: 1, name: "x" }, 404));
// @ts-expect-error: a plain Response is no JSON reply (the operation declares no other kind)
route(app, rename, auth, () => new Response("{}"));
// @ts-expect-error: an element of the list lacks "name"
route(app, list, auth, (c) => c.json([{ id: 1 }]));
// @ts-expect-error: a reply from one of several returns is checked too
route(app, list, auth, async (c) => {
  if (Math.random() > 0.5) return c.json([{ id: 1, name: "x" }]);
  return c.json([{ id: "1", name: "x" }]);
});

// A route with a media reply may answer any Response, but no JSON of another shape.
const files = route(app, file, auth, (c, { params }) => (params.id === "csv" ? new Response("a,b\n") : params.id === "body" ? c.body("a,b\n") : c.json({ id: 1, name: "x" })));
// @ts-expect-error: "name" must be a string
route(app, file, auth, (c) => c.json({ id: 1, name: 2 }));

// The client's registry: what a method and path answer.
const typed = routes(app, renamed, files);
type Registry = NonNullable<(typeof typed)["operations"]>;
export const reply: ReplyAt<OperationAt<Registry, "post", "/things/:id{[0-9]+}/name">> = { id: 1, name: "x" };
// @ts-expect-error: the reply of that path has no "title"
export const wrong: ReplyAt<OperationAt<Registry, "post", "/things/:id{[0-9]+}/name">> = { id: 1, name: "x", title: "y" };
