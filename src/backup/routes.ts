import { PassThrough, Readable } from "node:stream";
import { recordRequest } from "../http/actor.ts";
import { Hono } from "hono";
import type { Auth } from "../auth/middleware.ts";
import { errors, ErrorBody, route } from "../http/openapi.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { takeSnapshot } from "./backup.ts";
import { dateOf } from "../util/time.ts";

/** `POST /api/v1/backup` (see backup.ts for what it holds), with its operation (src/http/openapi.ts, `route`). */
export function backupRoutes(ctx: AppContext, auth: Auth): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  route(
    app,
    {
      method: "post",
      path: "/api/v1/backup",
      tag: "system",
      access: "management",
      summary:
        "A consistent backup of the data dir, streamed as one tar with a SHA-256 manifest (admin_rw: it holds the keys and secrets); labgate backup calls it while the server runs",
      responses: {
        200: { description: "The backup (labgate restore reads it)", media: "application/x-tar" },
        401: errors[401],
        403: errors[403],
        503: { description: "The database is not writable", json: ErrorBody },
      },
    },
    auth.management("admin_rw"),
    async (c) => {
      // In the log before the snapshot: the backup holds its own entry.
      await recordRequest(ctx, c, "backup", "data_dir");
      // Before the answer starts: a database that cannot be read is a 503, not a cut stream.
      const snapshot = await takeSnapshot({ config: ctx.config, store: ctx.store, serverRunning: true, now: dateOf(ctx.clock), warn: (m) => ctx.log.warn(`backup: ${m}`) });
      const out = new PassThrough({ highWaterMark: 256 * 1024 });
      const writing = snapshot.write(out);
      const requestId = c.get("requestId");
      writing.then(
        ({ entries, bytes }) => ctx.log.info(`backup: ${entries} entries, ${bytes} bytes sent`, { request_id: requestId }),
        // The status is out already: the client sees the stream cut (and its manifest check fails).
        (error) => ctx.log.warn(`backup: not completed: ${(error as Error).message}`, { request_id: requestId }),
      );
      const body = Readable.toWeb(out) as unknown as ReadableStream<Uint8Array>;
      return c.body(body, 200, { "Content-Type": "application/x-tar", "Content-Disposition": 'attachment; filename="labgate-backup.tar"', "Cache-Control": "no-store" });
    },
  );
  return app;
}
