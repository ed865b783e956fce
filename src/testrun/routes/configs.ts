/**
 * Config routes, both variants: list, upload, info, file,
 * delete, test-suites, override-hints. Handlers parse, authorize and call the store/loader.
 */
import { Hono, type Context } from "hono";
import { recordRequest } from "../../http/actor.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { readMultipart } from "../../http/multipart.ts";
import { LabgateError } from "../../util/errors.ts";
import { serveFile } from "../../storage/send.ts";
import { statFile } from "../../util/files.ts";
import { hasYamlExtension, isConfigName } from "../config/names.ts";
import type { ConfigStore } from "../config/store.ts";
import { listSuites, overrideHints } from "../config/plan-builder.ts";
import type { ConfigViewCache } from "../config/view-cache.ts";
import { PlanError } from "../plan.ts";
import type { TestRunAccess } from "./access.ts";
import * as z from "zod";
import { errors, ok, route, routes, type Reply } from "../../http/openapi.ts";
import { loadConfigFiles, LoadError } from "../config/loader.ts";
import { nodeNamed, pushConfigs } from "../runs/nodes.ts";
import { ConfigProblem, configListQuery, pushBody, PushResult, TestConfig, TestConfigInfo, UploadRefusal } from "../schema.ts";

/** A config that does not load: the file and line when known. */
export const e422Config: Reply = { description: "The config does not load (file and line when known)", json: ConfigProblem };

const NOT_FOUND = "Configuration file not found";
/** Room for multipart boundaries and headers on top of the file itself. */
const MULTIPART_OVERHEAD = 64 * 1024;

/** Receives the multipart field `file`, streaming it into the store; visible once the whole form was read. */
async function receiveUpload(c: Context<AppEnv>, store: ConfigStore): Promise<TestConfig> {
  const declared = Number(c.req.header("content-length") ?? NaN);
  if (declared > store.maxBytes + MULTIPART_OVERHEAD) throw new LabgateError("too_large", `config is larger than ${store.maxBytes} bytes`);
  const { file } = await readMultipart(c, {
    file: {
      field: "file",
      receive: (stream, given) => {
        // Browsers and tools may send a path; only its last component names the config.
        const name = given.split(/[\\/]/).pop() ?? "";
        if (given === "" || name === "") throw new LabgateError("invalid", "Empty filename");
        if (!hasYamlExtension(name)) throw new LabgateError("invalid", "Only YAML (.yaml, .yml) files are allowed");
        if (!isConfigName(name)) throw new LabgateError("invalid", "invalid config name");
        return store.receive(name, stream);
      },
      discard: (pending) => pending.discard(),
    },
    // fileSize one over the limit: the store sees the excess and answers 413.
    limits: { files: 5, fields: 20, parts: 40, fieldSize: 64 * 1024, fieldsTotal: 64 * 1024, headerPairs: 50, fileSize: store.maxBytes + 1 },
    texts: { notMultipart: "No file part in the request (expected multipart/form-data with a 'file' field)", malformed: "malformed multipart request", interrupted: "upload interrupted" },
  });
  if (!file) throw new LabgateError("invalid", "No file part in the request");
  return file.commit();
}

/** Maps loader errors for the two read views: 404 missing, 422 `Failed to parse file: ...`. */
function view<T>(fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (!(error instanceof PlanError)) throw error;
    if (error.problem === "config_missing" || error.problem === "bad_config_name") throw new LabgateError("not_found", NOT_FOUND);
    throw new LabgateError("unprocessable", `Failed to parse file: ${error.message}`, error.details);
  }
}

export function configRoutes(ctx: AppContext, access: TestRunAccess, store: ConfigStore, views: ConfigViewCache) {
  const app = new Hono<AppEnv>();
  const { doc, replies } = access;

  const getConfigs = route(
    app,
    {
      method: "get",
      path: "/api/v1/configs",
      ...doc,
      summary: "Uploaded test configs (?details=true: with size)",
      query: configListQuery,
      responses: replies({ 200: ok(z.array(TestConfig), "By name"), 400: errors[400] }),
    },
    access.read,
    (c, { query }) => {
      const configs: TestConfig[] = query.details ? store.listWithSizes() : store.list();
      return c.json(configs);
    },
  );

  const postConfigs = route(
    app,
    {
      method: "post",
      path: "/api/v1/configs",
      ...doc,
      summary: "Upload a test config (multipart field `file`; stored under the file's name)",
      body: { multipart: z.object({ file: z.string().describe("the YAML file") }) },
      responses: replies({ 200: ok(TestConfig, "Stored"), 400: { description: "Refused (an invalid YAML's line when known)", json: UploadRefusal }, 413: errors[413] }),
    },
    access.write,
    async (c) => {
      const info = await receiveUpload(c, store);
      await recordRequest(ctx, c, "config.upload", `config:${info.name}`);
      return c.json(info);
    },
  );

  const getConfigsByName = route(app, { method: "get", path: "/api/v1/configs/:name", ...doc, summary: "One config", responses: replies({ 200: ok(TestConfigInfo, "OK"), 404: errors[404] }) }, access.read, (c) => {
    const name = c.req.param("name") ?? "";
    const info = store.info(name);
    if (!info) throw new LabgateError("not_found", `File not found: ${name}`);
    const answer: TestConfigInfo = { name: info.name, config_name: info.name, created: info.created };
    return c.json(answer);
  });

  const getConfigsByNameFile = route(app, { method: "get", path: "/api/v1/configs/:name/file", ...doc, summary: "The config file", responses: replies({ 200: { description: "YAML", media: "text/yaml" }, 404: errors[404] }) }, access.read, (c) => {
    const name = c.req.param("name") ?? "";
    const file = statFile(store.pathOf(name));
    if (!file) throw new LabgateError("not_found", NOT_FOUND);
    return serveFile(c, file, {
      // The name is from the safe set ([A-Za-z0-9._-]), so it needs no quoting.
      headers: { "content-type": "text/yaml; charset=utf-8", "content-disposition": `attachment; filename=${name}` },
    });
  });

  const deleteConfigsByName = route(app, { method: "delete", path: "/api/v1/configs/:name", ...doc, summary: "Delete a config", responses: replies({ 200: ok(), 404: errors[404] }) }, access.write, async (c) => {
    const name = c.req.param("name") ?? "";
    if (!store.delete(name)) throw new LabgateError("not_found", NOT_FOUND);
    await recordRequest(ctx, c, "config.delete", `config:${name}`);
    return c.json({});
  });

  // Variant A only: copies of a stored config (and its includes) on lab nodes, for a trigger on
  // several nodes; its suites and hints.
  const variantA = () => {
    const postConfigsByNamePush = route(
      app,
      {
        method: "post",
        path: "/api/v1/configs/:name/push",
        ...doc,
        summary: "Copy a stored config and its includes to lab nodes (each node's result)",
        body: { json: pushBody },
        responses: replies({ 200: ok(z.array(PushResult), "Each node's result"), 400: errors[400], 404: errors[404] }),
      },
      access.write,
      async (c, { body: { nodes } }) => {
        const name = c.req.param("name") ?? "";
        const text = store.read(name);
        if (text === undefined) throw new LabgateError("not_found", NOT_FOUND);
        for (const node of nodes) nodeNamed(ctx, node); // 404 for an unknown node before anything is sent
        let files: Array<[string, string]> = [[name, text]];
        try {
          files = Object.entries(loadConfigFiles(store, name).files);
        } catch (error) {
          if (!(error instanceof LoadError)) throw error; // a config that does not load is pushed alone: the node says why
        }
        const results = await pushConfigs(ctx, files, [...new Set(nodes)]);
        await recordRequest(ctx, c, "config.push", `config:${name}`, { nodes: [...new Set(nodes)].slice(0, 20), files: files.length });
        return c.json(results);
      },
    );

    const names = { 200: ok(z.array(z.string()), "OK"), 404: errors[404], 422: e422Config };
    const getConfigsByNameTestSuites = route(app, { method: "get", path: "/api/v1/configs/:name/test-suites", ...doc, summary: "The config's test suites", responses: replies(names) }, access.read, (c) => {
      const name = c.req.param("name") ?? "";
      const suites: string[] = view(() => views.get("test-suites", name, (source) => listSuites(source, name)));
      return c.json(suites);
    });
    const getConfigsByNameOverrideHints = route(app, { method: "get", path: "/api/v1/configs/:name/override-hints", ...doc, summary: "Keys overrides may set", responses: replies(names) }, access.read, (c) => {
      const name = c.req.param("name") ?? "";
      const hints: string[] = view(() => views.get("override-hints", name, (source) => overrideHints(source, name)));
      return c.json(hints);
    });
    return [postConfigsByNamePush, getConfigsByNameTestSuites, getConfigsByNameOverrideHints] as const;
  };

  const onlyA = ctx.config.test_server.api_variant === "A" ? variantA() : [];
  return routes(app, getConfigs, postConfigs, getConfigsByName, getConfigsByNameFile, deleteConfigsByName, ...onlyA);
}
