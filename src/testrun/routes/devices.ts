/**
 * Routes of runs on managed devices (docs/device-tests.md): the agents' artifact uploads (device
 * token), the places a user may run tests on, and a config's results per device over its last
 * runs (the history matrix).
 */
import { Readable } from "node:stream";
import { Hono } from "hono";
import * as z from "zod";
import type { Auth } from "../../auth/middleware.ts";
import { requestBodyStream } from "../../http/body.ts";
import { integerParam, queryOf } from "../../http/openapi.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { isConfigName } from "../config/names.ts";
import { testableTargets } from "../devices/targets.ts";
import type { TestRunService } from "../runs/service.ts";
import { runObjectA } from "../runs/views.ts";
import type { TestRunAccess } from "./access.ts";

/** PUT .../artifacts/{name}: where the body goes in the file (its present size; 409 answers the right one). */
export const artifactUploadQuery = z.object({
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("the artifact's present size on the gateway (0 for a new one)"),
});

/** GET /api/v1/configs/{name}/history: how many runs back, and one page of (device, test) rows. */
export const historyQuery = z.object({
  runs: integerParam("runs", 1, 100).describe("the newest runs on devices to show (default 10)"),
  limit: integerParam("limit", 1, 1000).describe("rows (device, test) in this page (default 100; X-Total-Count: how many in all)"),
  offset: integerParam("offset", 0, Number.MAX_SAFE_INTEGER).describe("skip this many rows"),
});

/** A result sequence, newest first: flaky when it both passed and failed, newly failing when it failed now after passing before. */
function trend(results: (string | null)[]): { flaky: boolean; newly_failing: boolean } {
  const seen = results.filter((r): r is string => r !== null);
  const flaky = seen.includes("passed") && seen.includes("failed");
  return { flaky, newly_failing: seen[0] === "failed" && seen[1] === "passed" };
}

export function deviceRunRoutes(ctx: AppContext, auth: Auth, access: TestRunAccess, service: TestRunService): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.put("/api/v1/devices/test-runs/:id/artifacts/*", auth.device(), async (c) => {
    const identity = c.get("identity");
    if (identity.kind !== "device") throw new LabgateError("forbidden", "a device token is required");
    const marker = "/artifacts/";
    let name: string;
    try {
      name = decodeURIComponent(c.req.path.slice(c.req.path.indexOf(marker) + marker.length));
    } catch {
      throw new LabgateError("invalid", "invalid artifact name");
    }
    const { offset } = queryOf(c, artifactUploadQuery);
    const body = requestBodyStream(c) ?? Readable.from([]);
    try {
      const size = await service.deviceArtifact(c.req.param("id"), identity.mac, name, offset ?? 0, body);
      return c.json({ offset: size });
    } catch (error) {
      body.resume(); // drain what the device still sends
      throw error;
    }
  });

  if (ctx.config.test_server.api_variant === "A") {
    app.get("/api/v1/test-targets", access.read, (c) => {
      const targets = testableTargets(ctx.db, c.get("identity"));
      return c.json({ devices: targets.devices.map((d) => ({ name: d.name, mac_address: d.mac })), total: targets.total, groups: targets.groups, tags: targets.tags });
    });

    app.get("/api/v1/configs/:name/history", access.read, (c) => {
      const name = c.req.param("name");
      if (!isConfigName(name)) throw new LabgateError("invalid", "invalid config name");
      const query = queryOf(c, historyQuery);
      const history = service.store.deviceHistory(name, query.runs ?? 10, { limit: query.limit ?? 100, offset: query.offset ?? 0 });
      c.header("X-Total-Count", String(history.total));
      return c.json({
        runs: history.runs.map((r) => {
          const run = runObjectA(r);
          return { id: run.id, created_at: run.created_at, status: run.status, test_suite_name: run.test_suite_name, machine_target: run.machine_target };
        }),
        rows: history.rows.map((r) => ({ device: r.device, mac_address: r.mac, test_name: r.testName, results: r.results, ...trend(r.results) })),
      });
    });
  }
  return app;
}
