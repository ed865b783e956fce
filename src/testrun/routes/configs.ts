/**
 * Config routes, both variants: list, upload, info, file,
 * delete, test-suites, override-hints. Handlers parse, authorize and call the store/loader.
 */
import { Hono, type Context } from "hono";
import { recordRequest } from "../../audit/audit.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { readMultipart } from "../../http/multipart.ts";
import { LabgateError } from "../../util/errors.ts";
import { serveFile } from "../../storage/send.ts";
import { statFile } from "../../util/files.ts";
import { hasYamlExtension, isConfigName } from "../config/names.ts";
import type { ConfigInfo, ConfigStore } from "../config/store.ts";
import { listSuites, overrideHints } from "../config/plan-builder.ts";
import type { ConfigViewCache } from "../config/view-cache.ts";
import { PlanError } from "../plan.ts";
import type { TestRunAccess } from "./access.ts";
import { z } from "zod";
import { jsonBody, jsonObject, queryOf } from "../../http/openapi.ts";
import { loadConfigFiles, LoadError } from "../config/loader.ts";
import { nodeNamed, pushConfigs } from "../runs/nodes.ts";

/** GET /configs?details=true adds each config's `size` (labgate, for the console); without it the list is as before. */
export const configListQuery = z.object({
  details: z.enum(["true"], { error: 'query parameter "details" must be true' }).optional().describe("labgate: also each config's size in bytes"),
});

/** POST /configs/{name}/push: the nodes to copy the config (and its includes) to. */
export const pushBody = z.strictObject(
  { nodes: z.array(z.string({ error: "nodes must be a list of node names" }), { error: "nodes must be a list of node names" }).min(1, { error: "nodes must name at least one node" }).max(256) },
  jsonObject,
);

const NOT_FOUND = "Configuration file not found";
/** Room for multipart boundaries and headers on top of the file itself. */
const MULTIPART_OVERHEAD = 64 * 1024;

/** Receives the multipart field `file`, streaming it into the store; visible once the whole form was read. */
async function receiveUpload(c: Context<AppEnv>, store: ConfigStore): Promise<ConfigInfo> {
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

export function configRoutes(ctx: AppContext, access: TestRunAccess, store: ConfigStore, views: ConfigViewCache): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.get("/api/v1/configs", access.read, (c) => c.json(queryOf(c, configListQuery).details ? store.listWithSizes() : store.list()));

  app.post("/api/v1/configs", access.write, async (c) => {
    const info = await receiveUpload(c, store);
    await recordRequest(ctx, c, "config.upload", `config:${info.name}`);
    return c.json(info);
  });

  app.get("/api/v1/configs/:name", access.read, (c) => {
    const name = c.req.param("name");
    const info = store.info(name);
    if (!info) throw new LabgateError("not_found", `File not found: ${name}`);
    return c.json({ name: info.name, config_name: info.name, created: info.created });
  });

  app.get("/api/v1/configs/:name/file", access.read, (c) => {
    const name = c.req.param("name");
    const file = statFile(store.pathOf(name));
    if (!file) throw new LabgateError("not_found", NOT_FOUND);
    return serveFile(c, file, {
      // The name is from the safe set ([A-Za-z0-9._-]), so it needs no quoting.
      headers: { "content-type": "text/yaml; charset=utf-8", "content-disposition": `attachment; filename=${name}` },
    });
  });

  app.delete("/api/v1/configs/:name", access.write, async (c) => {
    if (!store.delete(c.req.param("name"))) throw new LabgateError("not_found", NOT_FOUND);
    await recordRequest(ctx, c, "config.delete", `config:${c.req.param("name")}`);
    return c.json({});
  });

  // Copies of a stored config (and its includes) on lab nodes, for a trigger on several nodes.
  if (ctx.config.test_server.api_variant === "A") {
    app.post("/api/v1/configs/:name/push", access.write, async (c) => {
      const name = c.req.param("name");
      const { nodes } = await jsonBody(c, pushBody);
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
    });
  }

  // Suites and hints are Variant A routes only (seed; 13: B has no suites or hints).
  if (ctx.config.test_server.api_variant === "A") {
    app.get("/api/v1/configs/:name/test-suites", access.read, (c) => {
      const name = c.req.param("name");
      return c.json(view(() => views.get("test-suites", name, (source) => listSuites(source, name))));
    });
    app.get("/api/v1/configs/:name/override-hints", access.read, (c) => {
      const name = c.req.param("name");
      return c.json(view(() => views.get("override-hints", name, (source) => overrideHints(source, name))));
    });
  }

  return app;
}
