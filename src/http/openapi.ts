/*
 * The OpenAPI 3.1 description of the HTTP API, built from the same zod schemas `route` validates
 * requests with. zod 4 emits JSON Schema 2020-12, which is OpenAPI 3.1's schema dialect, so the
 * schemas go into the document as they are.
 *
 * Why not @hono/zod-openapi: its validators read bodies with `c.req.json()`, bypassing
 * readBodyBytes (the 413 limit, the fast path for update checks) and answering with messages of
 * its own; labgate's status codes and error texts are part of its interface. Here a route is
 * registered with its operation (`route(app, operation, ...middleware, handler)`): its request
 * and response schemas are written once, where the route is; `route` parses the body, query and
 * path parameters with them and hands them to the handler typed, the handler's replies are
 * type-checked against the operation's responses, and the document is made from what the
 * routers registered. A test fails when a route has no operation.
 */
import type { Context, Env, Hono, MiddlewareHandler, TypedResponse } from "hono";
import type { StatusCode } from "hono/utils/http-status";
import * as z from "zod";
import { readJson } from "./body.ts";
import { LabgateError } from "../util/errors.ts";
import { firstMessage, reportedIssue } from "../util/shapes.ts";

export { firstMessage };

export type Method = "get" | "post" | "put" | "patch" | "delete";

/** Who may call: nobody needs a token (`public`), a management token, a device token, either. */
export type Access = "public" | "management" | "device" | "any";

export interface Reply {
  description: string;
  /** A JSON body of this shape. */
  json?: z.ZodType;
  /** Another media type (a file, CSV, an event stream). */
  media?: string;
  /** Response headers a client may rely on: name -> description. */
  headers?: Record<string, string>;
}

export interface Operation {
  method: Method;
  /**
   * OpenAPI form (`/api/v1/logs/{id}`; a trailing `{path}` stands for the rest of the path), or,
   * for a route registered with `route`, Hono's (`/api/v1/logs/:id`), made OpenAPI's in the document.
   */
  path: string;
  summary: string;
  access: Access;
  tag: string;
  query?: z.ZodObject;
  /**
   * The request body. A JSON body is read with its Content-Type checked (readJson: else 415, which
   * the document adds to the operation), unless `anyType`: the route reads the bytes whatever the
   * type says (a signed body, whose signature covers the bytes). `route` parses a JSON body and
   * hands it to the handler, unless `anyType` or `parsedBy: "handler"` (the update check's own
   * faster parser; a body read only after a check that must cost no parsing, or that may be
   * absent); multipart and media bodies are streamed by the handler.
   */
  body?: { json: z.ZodType; anyType?: true; parsedBy?: "handler" } | { multipart: z.ZodObject } | { media: string };
  responses: Record<number, Reply>;
  /** A WebSocket route (answers 101 to an upgrade). */
  websocket?: boolean;
}

/** The operations of each router, recorded by `route` as it registers them. */
const registered = new WeakMap<object, Operation[]>();

/** The names of a Hono path's parameters (`/api/v1/logs/:id{[0-9]+}` -> "id"). */
type ParamNames<P extends string> = P extends `${string}:${infer Rest}`
  ? Rest extends `${infer Name}/${infer Tail}`
    ? Unconstrained<Name> | ParamNames<`/${Tail}`>
    : Unconstrained<Rest>
  : never;
type Unconstrained<N extends string> = N extends `${infer Name}{${string}` ? Name : N;

/** What the handler types read of an operation (handlers shared by several operations are typed by this much). */
export type Described = Pick<Operation, "responses"> & Partial<Pick<Operation, "path" | "body" | "query">>;
type PathOf<O extends Described> = O extends { path: infer P extends string } ? P : string;

/** What `route` parsed for the handler: the JSON body, the query and the path parameters, typed from the operation. */
export interface Input<O extends Described> {
  body: O["body"] extends { json: infer T extends z.ZodType; anyType?: undefined; parsedBy?: undefined } ? z.output<T> : undefined;
  query: O["query"] extends z.ZodType ? z.output<O["query"]> : undefined;
  params: { [K in ParamNames<PathOf<O>>]: string };
}

type Statuses<O extends Described> = keyof O["responses"] & StatusCode;
/** The statuses whose reply is a JSON body, and that body's type (what a client reads: the schema's output). */
type JsonStatus<O extends Described> = { [S in Statuses<O>]: O["responses"][S] extends { json: z.ZodType } ? S : never }[Statuses<O>];
type JsonOf<O extends Described, S> = S extends keyof O["responses"] ? (O["responses"][S] extends { json: infer T extends z.ZodType } ? z.output<T> : never) : never;

/** A JSON reply of status `S` whose body is a `T`. */
export type JsonReply<S extends StatusCode, T> = Response & TypedResponse<T, S, "json">;

/**
 * What a handler may answer: a JSON reply of a status and shape the operation declares, or, when
 * the operation declares a reply without a JSON body (a file, a stream, 204, an upgrade), any
 * Response that is not an undeclared JSON one.
 */
export type ReplyOf<O extends Described> =
  | { [S in JsonStatus<O>]: JsonReply<S, JsonOf<O, S>> }[JsonStatus<O>]
  | ({ [S in Statuses<O>]: O["responses"][S] extends { json: z.ZodType; media?: undefined } ? never : S }[Statuses<O>] extends never ? never : Response & { _format?: "body" | "text" | "redirect" });

/** `c.json` held to the operation: the body must be of the declared shape for its status (200 unless given). */
interface JsonOfOperation<O extends Described> {
  (value: JsonOf<O, 200>): JsonReply<200, JsonOf<O, 200>>;
  <S extends JsonStatus<O>>(value: JsonOf<O, S>, status: S, headers?: Record<string, string>): JsonReply<S, JsonOf<O, S>>;
}

/** The handler's context: Hono's, with the path's parameters typed and `c.json` held to the operation. */
export type RouteContext<E extends Env, O extends Described> = { json: JsonOfOperation<O> } & Context<E, PathOf<O>>;

export type RouteHandler<E extends Env, O extends Described> = (c: RouteContext<E, O>, input: Input<O>) => ReplyOf<O> | Promise<ReplyOf<O>>;

/**
 * Registers a route on `app` for the operation's method and path: the middleware first (the auth
 * check), then the handler, handed what `route` parsed. A WebSocket operation's handlers are
 * Hono's own (the last is the upgrade). The operation is recorded for the OpenAPI document and
 * returned, its type kept, for the routers' type-level registry (`Routes`).
 */
export function route<E extends Env, const O extends Operation>(
  app: Hono<E>,
  operation: O,
  ...handlers: [...Array<MiddlewareHandler<E>>, NoInfer<RouteHandler<E, O>> | (O extends { websocket: true } ? MiddlewareHandler<E> : never)]
): O {
  let list = registered.get(app);
  if (!list) registered.set(app, (list = []));
  list.push({ ...operation, path: openApiPath(operation.path) });
  const method = operation.method.toUpperCase();
  if (operation.websocket) {
    app.on(method, [operation.path], ...(handlers as Array<MiddlewareHandler<E>>));
    return operation;
  }
  const middleware = handlers.slice(0, -1) as Array<MiddlewareHandler<E>>;
  const handler = handlers[handlers.length - 1] as RouteHandler<E, O>;
  app.on(method, [operation.path], ...middleware, async (c: Context<E>) => handler(c as RouteContext<E, O>, await inputOf(operation, c)));
  return operation;
}

/** Parses what the operation declares, once, before the handler runs: failures are 400s (415 and 413 from readJson). */
async function inputOf<O extends Operation>(operation: O, c: Context): Promise<Input<O>> {
  const { body, query } = operation;
  const params = c.req.param() as Record<string, string>;
  // No name or id holds a NUL (PostgreSQL's text cannot): such a path names nothing, on either engine.
  if (Object.values(params).some((value) => value.includes("\0"))) throw new LabgateError("not_found", `nothing at ${c.req.method} ${c.req.path}: a path parameter holds a NUL character`);
  return {
    body: body && "json" in body && !body.anyType && !body.parsedBy ? await jsonBody(c, body.json) : undefined,
    query: query ? queryOf(c, query) : undefined,
    params,
  } as Input<O>;
}

/** A router with the operations it registered, as types only: the console's client is typed from them (src/server/api.ts). */
export type Routes<E extends Env, Operations extends Operation> = Hono<E> & { readonly operations?: Operations };

/** `app`, typed with the operations `route` returned for it. */
export const routes = <E extends Env, const Operations extends readonly Operation[]>(app: Hono<E>, ..._operations: Operations): Routes<E, Operations[number]> => app;

/*
 * A registry of operations (a union, e.g. src/server/api.ts's `Api`) read by method and path, for
 * a client: the operation, its path parameters, query, JSON body and the JSON of its 200 reply.
 */
export type OperationAt<R extends Operation, M extends Method, P extends string> = Extract<R, { method: M; path: P }>;
export type PathParams<P extends string> = { [K in ParamNames<P>]: string | number };
export type QueryAt<O extends Operation> = O["query"] extends z.ZodType ? { [K in keyof z.input<O["query"]>]: string | number | boolean | undefined } : {};
export type BodyAt<O extends Operation> = O["body"] extends { json: infer T extends z.ZodType } ? z.input<T> : never;
export type ReplyAt<O extends Described> = JsonOf<O, 200>;

/** The operations `route` registered on `app`. */
export const operationsOf = (app: object): Operation[] => registered.get(app) ?? [];

export const ErrorBody = z
  .object({
    error: z.string(),
    field: z.string().optional().describe('the request field the error is about, as a dotted path ("metadata.name"), when it is about one'),
  })
  .meta({ id: "Error" });
export const Empty = z.object({}).meta({ id: "Empty" });

/**
 * Reads a JSON body and validates it with `schema`. Failures are 400s whose text is the schema's
 * own message (schemas carry labgate's existing texts); an unknown field is reported first, as
 * the hand-written checks did.
 */
export async function jsonBody<T extends z.ZodType>(c: Context, schema: T): Promise<z.output<T>> {
  const result = schema.safeParse(await readJson(c));
  if (result.success) return result.data;
  throw invalidInput(result.error);
}

/** The query parameters validated with `schema` (an operation's `query`); failures are 400s with the schema's message. */
export function queryOf<T extends z.ZodType>(c: Context, schema: T): z.output<T> {
  const result = schema.safeParse(c.req.query());
  if (result.success) return result.data;
  throw invalidInput(result.error);
}

/** The 400 for input a schema refused: its first message, and the field it is about (`field`, a dotted path) when it names one. */
export function invalidInput(error: z.ZodError): LabgateError {
  const issue = reportedIssue(error);
  const path = issue.code === "unrecognized_keys" && issue.keys.length === 1 ? [...issue.path, issue.keys[0]] : issue.path;
  return new LabgateError("invalid", firstMessage(error), path.length > 0 ? { field: path.map(String).join(".") } : undefined);
}

/**
 * JSON Schema for `schema`. Schemas named with `.meta({ id })` become `components.schemas`
 * entries (zod puts them under `$defs`, which a reference from inside the document cannot reach).
 */
function toJsonSchema(schema: z.ZodType, io: "input" | "output", components: Record<string, unknown>): Record<string, unknown> {
  const { $schema: _drop, $defs, ...rest } = z.toJSONSchema(schema, { target: "draft-2020-12", io, unrepresentable: "any", reused: "inline" }) as Record<string, unknown>;
  const relink = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(relink);
    if (value === null || typeof value !== "object") return value;
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, k === "$ref" && typeof v === "string" ? v.replace(/^#\/\$defs\//, "#/components/schemas/") : relink(v)]),
    );
  };
  // Input and output forms of a named schema may differ (defaults, transforms): the output form is named `<id>`.
  for (const [id, def] of Object.entries(($defs ?? {}) as Record<string, unknown>)) if (io === "output" || !(id in components)) components[id] = relink(def);
  return relink(rest) as Record<string, unknown>;
}

/** Hono's path (`/api/v1/logs/:id{[0-9]+}`, `/local_storage/*`) in OpenAPI form. */
export function openApiPath(honoPath: string): string {
  return honoPath.replace(/:([A-Za-z_]+)(\{[^}]*\})?/g, "{$1}").replace(/\/\*$/, "/{path}");
}

const SECURITY: Record<Access, Array<Record<string, string[]>>> = {
  public: [],
  management: [{ management: [] }, { session: [] }],
  device: [{ device: [] }],
  any: [{ management: [] }, { session: [] }, { device: [] }],
};

/** The document for `operations` (paths in OpenAPI form). */
export function openApiDocument(operations: Operation[], info: { title: string; version: string; description?: string }): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const schemas: Record<string, unknown> = {};
  const jsonSchema = (schema: z.ZodType, io: "input" | "output") => toJsonSchema(schema, io, schemas);
  for (const op of operations) {
    const params = [...op.path.matchAll(/\{([A-Za-z_]+)\}/g)].map((m) => ({ name: m[1], in: "path", required: true, schema: { type: "string" } }));
    const query = op.query
      ? Object.entries(op.query.shape).map(([name, schema]) => ({
          name,
          in: "query",
          required: !(schema as z.ZodType).safeParse(undefined).success,
          schema: jsonSchema(schema as z.ZodType, "input"),
          ...((schema as z.ZodType).description ? { description: (schema as z.ZodType).description } : {}),
        }))
      : [];
    let requestBody: Record<string, unknown> | undefined;
    if (op.body && "json" in op.body) requestBody = { required: true, content: { "application/json": { schema: jsonSchema(op.body.json, "input") } } };
    else if (op.body && "multipart" in op.body) requestBody = { required: true, content: { "multipart/form-data": { schema: jsonSchema(op.body.multipart, "input") } } };
    else if (op.body) requestBody = { required: true, content: { [op.body.media]: { schema: { type: "string", contentEncoding: "binary" } } } };
    const responses: Record<string, unknown> = {};
    for (const [code, reply] of Object.entries(op.responses)) {
      const content = {
        ...(reply.json ? { "application/json": { schema: jsonSchema(reply.json, "output") } } : {}),
        ...(reply.media ? { [reply.media]: { schema: { type: "string" } } } : {}),
      };
      const headers = reply.headers && Object.fromEntries(Object.entries(reply.headers).map(([name, description]) => [name, { description, schema: { type: "string" } }]));
      responses[code] = { description: reply.description, ...(Object.keys(content).length > 0 ? { content } : {}), ...(headers ? { headers } : {}) };
    }
    if (op.body && "json" in op.body && !op.body.anyType) responses["415"] ??= { description: NOT_JSON.description, content: { "application/json": { schema: jsonSchema(ErrorBody, "output") } } };
    paths[op.path] ??= {};
    paths[op.path][op.method] = {
      operationId: `${op.method}${op.path.replace(/\{([^}]+)\}/g, "By_$1").replace(/[^A-Za-z0-9]+(.)?/g, (_m, ch: string | undefined) => (ch ?? "").toUpperCase())}`,
      summary: op.summary,
      tags: [op.tag],
      security: SECURITY[op.access],
      ...(params.length + query.length > 0 ? { parameters: [...params, ...query] } : {}),
      ...(requestBody ? { requestBody } : {}),
      responses,
      ...(op.websocket ? { "x-websocket": true } : {}),
    };
  }
  return {
    openapi: "3.1.0",
    info,
    components: {
      schemas,
      securitySchemes: {
        management: { type: "http", scheme: "bearer", bearerFormat: "JWT", description: "Authorization: Bearer token=<management token>" },
        device: { type: "http", scheme: "bearer", bearerFormat: "JWT", description: "Authorization: Bearer token=<device token from POST /api/v1/auth/device>" },
        session: {
          type: "apiKey",
          in: "cookie",
          name: "labgate_session",
          description: "The console's session (POST /api/v1/auth/login). A request it authenticates that is not GET/HEAD/OPTIONS, or a WebSocket upgrade, must carry an Origin (or Referer) of this server: else 403.",
        },
      },
    },
    paths,
  };
}

/** The answer of a JSON route to a body of another Content-Type (src/http/body.ts, readJson). */
const NOT_JSON = { description: "The body is not JSON (Content-Type other than application/json)" };

/** Replies most operations share. */
export const errors = {
  400: { description: "Malformed request", json: ErrorBody },
  401: { description: "No valid token", json: ErrorBody },
  403: { description: "Not permitted", json: ErrorBody },
  404: { description: "Not found (or hidden from the caller)", json: ErrorBody },
  409: { description: "Conflicts with the current state", json: ErrorBody },
  413: { description: "Body too large", json: ErrorBody },
  416: { description: "The range is outside the file", json: ErrorBody },
  422: { description: "Understood but not acceptable", json: ErrorBody },
  429: { description: "Over a limit (the message names it); try again later", json: ErrorBody },
  502: { description: "The other side (a device, a node) answered with a failure", json: ErrorBody },
  503: { description: "Cannot be done now: the object store (or the database) is unavailable", json: ErrorBody },
  504: { description: "The other side (a device, a node) did not answer in time", json: ErrorBody },
} satisfies Record<number, Reply>;
/** The refusals of a route on one object: no token, not permitted, missing (a refused read looks missing). */
export const objectRefusals = { 401: errors[401], 403: errors[403], 404: errors[404] } satisfies Record<number, Reply>;
export function ok(): { description: string; json: typeof Empty };
export function ok<T extends z.ZodType>(json: T, description?: string): { description: string; json: T };
export function ok(json: z.ZodType = Empty, description = "Done"): Reply {
  return { description, json };
}
