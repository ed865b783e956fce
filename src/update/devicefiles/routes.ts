import { Readable } from "node:stream";
import { Hono } from "hono";
import { actorOf } from "../../http/actor.ts";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { requestBodyStream } from "../../http/body.ts";
import { errors, ok, objectRefusals, route, routes } from "../../http/openapi.ts";
import { publicBase, requireSignedLink } from "../../storage/routes.ts";
import { serveBytes, serveFile, serveStored } from "../../storage/send.ts";
import { authorize } from "../permissions/permissions.ts";
import { pathId } from "../validation.ts";
import { FetchedFile, FileRequest, PeerFetch } from "./schema.ts";
import { PEER_USER } from "../../cluster/cluster.ts";
import { dateOf } from "../../util/time.ts";
import { MULTIPART_LINK, type DeviceFileStore } from "./store.ts";
import type { FileTransferService } from "./transfers.ts";

const tag = "device files";
const FILE = { description: "The file", media: "application/octet-stream" };

/**
 * `POST /api/v2/devices/{id}/fs/file` and the public multipart routes, each contained to its own directory and signed.
 */
export function deviceFilesRoutes(ctx: AppContext, auth: Auth, transfers: FileTransferService, store: DeviceFileStore) {
  const app = new Hono<AppEnv>();

  const postDevicesByIdFsFile = route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/:id{[0-9]+}/fs/file",
      tag,
      access: "management",
      summary: "Fetch a file from the device (status 0 with a link, or 1)",
      body: { json: FileRequest },
      responses: { 200: ok(FetchedFile, "OK"), 400: errors[400], ...objectRefusals, 409: errors[409], 413: errors[413], 504: errors[504] },
    },
    auth.management(),
    async (c, { body: { file } }) => {
      const id = pathId(c.req.param("id"), "device");
      // Checked before the device is asked anything.
      await authorize(ctx.store.query, c.get("identity"), "device", id, "read");
      return c.json(await transfers.fetch(id, file, publicBase(ctx, c), actorOf(c, ctx.clock)));
    },
  );

  // Node to node: a fetch asked on another node for a device whose socket is here; the parts and the file stay here (src/cluster).
  const postClusterFiles = route(
    app,
    {
      method: "post",
      path: "/api/v1/cluster/files",
      tag,
      access: "management",
      summary: "Between the nodes of a cluster: a file fetch asked on another node, for a device whose socket is on this one (a node's own token only)",
      body: { json: PeerFetch },
      responses: { 200: ok(FetchedFile, "OK"), 400: errors[400], 401: errors[401], 403: errors[403], 404: errors[404], 409: errors[409], 413: errors[413], 504: errors[504] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      const identity = c.get("identity");
      if (identity.kind !== "mgmt" || identity.user !== PEER_USER) throw new LabgateError("forbidden", "only another node of the cluster calls this");
      const base = ctx.config.cluster.advertise_url || publicBase(ctx, c);
      return c.json(await transfers.fetch(body.device, body.file, base, { ...body.actor, at: dateOf(ctx.clock) }, true));
    },
  );

  const putLocalStorageMultipartPartsByPart = route(
    app,
    {
      method: "put",
      path: "/local_storage_multipart/parts/:part",
      tag,
      access: "public",
      summary: "A device uploads one part of an open transfer (signed URL)",
      body: { media: "application/octet-stream" },
      responses: { 200: { description: "Stored", headers: { ETag: "the part's name, for the device's reply" } }, 400: errors[400], 403: errors[403], 404: errors[404], 409: errors[409], 413: errors[413] },
    },
    async (c) => {
      const name = c.req.param("part") ?? "";
      const source = requestBodyStream(c) ?? Readable.from([]);
      try {
        const { etag } = await transfers.putPart(name, c.req.query("expires"), c.req.query("signature"), source);
        return c.body(null, 200, { ETag: etag });
      } catch (error) {
        source.resume(); // drain what the client still sends
        throw error;
      }
    },
  );

  const getLocalStorageMultipartMultipartPath = route(
    app,
    {
      method: "get",
      path: "/local_storage_multipart/multipart/*",
      tag,
      access: "public",
      summary: "A fetched device file through a signed link (Range supported)",
      responses: { 200: FILE, 206: { ...FILE, description: "Part of the file" }, 403: errors[403], 404: errors[404], 416: errors[416] },
    },
    async (c) => {
      // Hono already percent-decoded the path; keys are plain `<dir>/<uuid>`.
      const key = c.req.path.slice("/local_storage_multipart/multipart/".length);
      requireSignedLink(ctx, c, MULTIPART_LINK, key);
      if (store.objects && store.isKey(key)) {
        const stored = await serveStored(c, store.objects, store.objectKey(key));
        if (stored) return stored;
      }
      const object = store.objects ? undefined : store.stat(key);
      if (object) return serveFile(c, object);
      const inline = await store.inlineObject(key);
      if (inline) return serveBytes(c, inline.data, inline.modified);
      throw new LabgateError("not_found", "object does not exist");
    },
  );

  return routes(app, postClusterFiles, postDevicesByIdFsFile, putLocalStorageMultipartPartsByPart, getLocalStorageMultipartMultipartPath);
}
