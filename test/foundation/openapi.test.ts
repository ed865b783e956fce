import assert from "node:assert/strict";
import { test } from "node:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { openApiPath } from "../../src/http/openapi.ts";
import { removeDir, startTestServer, type ConfigPatch, type TestServer } from "../helpers/server.ts";

type Document = { openapi: string; paths: Record<string, Record<string, { requestBody?: unknown; security: unknown[] }>> };

const METHODS = new Set(["GET", "POST", "PUT", "PATCH", "DELETE"]);

/** Every method and path the server's app registers, in OpenAPI form. */
function registeredRoutes(server: TestServer): Set<string> {
  return new Set(server.server.app.routes.filter((r) => METHODS.has(r.method)).map((r) => `${r.method.toLowerCase()} ${openApiPath(r.path)}`));
}

const documented = (doc: Document): Set<string> => new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`)));

async function withServer(patch: ConfigPatch, fn: (server: TestServer) => Promise<void>) {
  const server = await startTestServer(patch);
  try {
    await fn(server);
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
}

for (const [label, patch] of [
  ["default config", {}],
  ["test_server.api_variant B, auth none", { test_server: { api_variant: "B", auth: "none" } }],
] as const) {
  test(`GET /api/openapi.json (${label}): public, a valid OpenAPI 3.1 document, every registered route in it and nothing else`, () =>
    withServer(patch as ConfigPatch, async (server) => {
      const res = await server.request("/api/openapi.json");
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
      const doc = (await res.json()) as Document;

      const validator = new Validator();
      const result = await validator.validate(doc as never);
      assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
      assert.equal(doc.openapi, "3.1.0");

      const routes = registeredRoutes(server);
      const inDoc = documented(doc);
      assert.deepEqual([...routes].filter((r) => !inDoc.has(r)).sort(), [], "registered routes missing from the document");
      assert.deepEqual([...inDoc].filter((r) => !routes.has(r)).sort(), [], "documented operations no route serves");
    }));
}

test("the document shows the schemas the handlers validate with", () =>
  withServer({ update_server: { device_logs_max_batch: 7 } }, async (server) => {
    const doc = (await (await server.request("/api/openapi.json")).json()) as Document;
    const body = (op: { requestBody?: unknown }) => (op.requestBody as { content: Record<string, { schema: any }> }).content["application/json"].schema;

    // The log batch: its configured maximum, the RFC 822 timestamp, no other fields.
    const batch = body(doc.paths["/api/v1/logs"].post);
    assert.equal(batch.properties.batch.maxItems, 7);
    assert.deepEqual(batch.properties.batch.items.required.sort(), ["device_timestamp", "entry", "name"]);
    assert.equal(batch.additionalProperties, false);
    assert.deepEqual(doc.paths["/api/v1/logs"].post.security, [{ device: [] }]);

    // A group's membership change: both id lists required, each id a positive integer or its decimal text.
    const members = body(doc.paths["/api/v2/groups/{id}/devices"].patch);
    assert.deepEqual(members.required.sort(), ["add", "remove"]);
    const id = members.properties.add.items;
    assert.deepEqual([id.type, id.minimum, id.pattern], [["integer", "string"], 1, "^\\d{1,16}$"]);

    // The console's routes: the login body, its cookie and throttling headers, the device list's paging.
    const any = doc as any;
    const login = any.paths["/api/v1/auth/login"].post;
    assert.deepEqual(body(login).required.sort(), ["password", "username"]);
    assert.ok(login.responses["200"].headers["Set-Cookie"]);
    assert.ok(login.responses["429"].headers["Retry-After"]);
    const devices = any.paths["/api/v2/devices"].get;
    assert.deepEqual(devices.parameters.map((p: { name: string }) => p.name), ["limit", "offset", "q", "sort", "order"]);
    assert.deepEqual([devices.parameters[0].schema.minimum, devices.parameters[0].schema.maximum], [1, 1000]);
    assert.ok(devices.responses["200"].headers["X-Total-Count"]);
    assert.deepEqual(devices.security, [{ management: [] }, { session: [] }]);

    // And the validator behind it answers with today's texts, naming the field when the problem is in one.
    const group = (await (await server.request("/api/v2/groups", { method: "POST", token: server.adminToken, json: { metadata: {} } })).json()) as { id: number };
    const patch = (json: unknown) => server.request(`/api/v2/groups/${group.id}/devices`, { method: "PATCH", token: server.adminToken, json });
    const cases: Array<[unknown, string, string?]> = [
      [{ add: [] }, 'schema validation failed: field "remove" is required', "remove"],
      [{ add: [0], remove: [] }, 'schema validation failed: field "add" must be an array of positive integer ids', "add.0"],
      [{ add: [], remove: [], more: 1 }, 'schema validation failed: unknown field "more"', "more"],
      [[], "expected a JSON object"],
    ];
    for (const [json, error, field] of cases) {
      const res = await patch(json);
      assert.equal(res.status, 400);
      assert.deepEqual(await res.json(), field ? { error, field } : { error });
    }
    const metadata = await server.request("/api/v2/groups", { method: "POST", token: server.adminToken, json: { metadata: 5 } });
    assert.equal(metadata.status, 400);
    assert.equal(((await metadata.json()) as { field?: string }).field, "metadata");
    assert.deepEqual(any.components.schemas.Error.properties.field.type, "string");
  }));
