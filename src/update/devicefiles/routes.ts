import { Readable } from "node:stream";
import { Hono } from "hono";
import { actorOf } from "../../audit/audit.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { requestBodyStream } from "../../http/body.ts";
import { jsonBody } from "../../http/openapi.ts";
import { publicBase, requireSignedLink } from "../../storage/routes.ts";
import { serveBytes, serveFile } from "../../storage/send.ts";
import { authorize } from "../permissions/permissions.ts";
import { pathId, strictBody, zRequiredString } from "../validation.ts";
import { MULTIPART_LINK, type DeviceFileStore } from "./store.ts";
import type { FileTransferService } from "./transfers.ts";

/** The body of fs/file: an absolute path on the device. */
export const fileRequestBody = strictBody({
  file: zRequiredString("file", 4096).startsWith("/", { error: 'schema validation failed: field "file" must be an absolute path' }),
});

/**
 * `POST /api/v2/devices/{id}/fs/file` and the public multipart routes, each contained to its own directory and signed.
 */
export function deviceFilesRoutes(ctx: AppContext, auth: Auth, transfers: FileTransferService, store: DeviceFileStore): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.post("/api/v2/devices/:id{[0-9]+}/fs/file", auth.management(), async (c) => {
    const id = pathId(c.req.param("id"), "device");
    // Checked before the device is asked anything.
    authorize(ctx.db, c.get("identity"), "device", id, "read");
    const { file } = await jsonBody(c, fileRequestBody);
    return c.json(await transfers.fetch(id, file, publicBase(ctx, c), actorOf(c, ctx.clock)));
  });

  app.put("/local_storage_multipart/parts/:part", async (c) => {
    const name = c.req.param("part");
    const source = requestBodyStream(c) ?? Readable.from([]);
    try {
      const { etag } = await transfers.putPart(name, c.req.query("expires"), c.req.query("signature"), source);
      return c.body(null, 200, { ETag: etag });
    } catch (error) {
      source.resume(); // drain what the client still sends
      throw error;
    }
  });

  app.get("/local_storage_multipart/multipart/*", (c) => {
    // Hono already percent-decoded the path; keys are plain `<dir>/<uuid>`.
    const key = c.req.path.slice("/local_storage_multipart/multipart/".length);
    requireSignedLink(ctx, c, MULTIPART_LINK, key);
    const object = store.stat(key);
    if (object) return serveFile(c, object);
    const inline = store.inlineObject(key);
    if (inline) return serveBytes(c, inline.data, inline.modified);
    throw new LabgateError("not_found", "object does not exist");
  });

  return app;
}
