/**
 * Routes of runs on managed devices (docs/device-tests.md): the agents' artifact uploads (device
 * token), the places a user may run tests on, and a config's results per device over its last
 * runs (the history matrix).
 */
import { Readable } from "node:stream";
import { Hono, type Context } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import { requestBodyStream } from "../../http/body.ts";
import { errors, ok, route, routes } from "../../http/openapi.ts";
import { clientAddress } from "../../http/transport.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import { isConfigName } from "../config/names.ts";
import { testableTargets } from "../devices/targets.ts";
import type { TestRunService } from "../runs/service.ts";
import { seenRun } from "../runs/sight.ts";
import { runObjectA } from "../runs/views.ts";
import type { TestRunAccess } from "./access.ts";
import { artifactUploadQuery, DevicePowerDone, DevicePowerRequest, DeviceTestHistory, historyQuery, PeerPowerRequest, PeerShareMessages, PeerShareStart, PeerShareStarted, TestTargets, UploadConflict, UploadOffset } from "../schema.ts";
import { PEER_USER } from "../../cluster/cluster.ts";

/** A result sequence, newest first: flaky when it both passed and failed, newly failing when it failed now after passing before. */
function trend(results: (string | null)[]): { flaky: boolean; newly_failing: boolean } {
  const seen = results.filter((r): r is string => r !== null);
  const flaky = seen.includes("passed") && seen.includes("failed");
  return { flaky, newly_failing: seen[0] === "failed" && seen[1] === "passed" };
}

/** The artifact name a device's upload path ends with. */
function artifactNameOf(path: string): string {
  const marker = "/artifacts/";
  try {
    return decodeURIComponent(path.slice(path.indexOf(marker) + marker.length));
  } catch {
    throw new LabgateError("invalid", "invalid artifact name");
  }
}

export function deviceRunRoutes(ctx: AppContext, auth: Auth, access: TestRunAccess, service: TestRunService) {
  const app = new Hono<AppEnv>();
  const { doc, replies } = access;

  // The device's own route: a device token, whatever test_server.auth says.
  const putDevicesTestRunsByIdArtifactsPath = route(
    app,
    {
      method: "put",
      path: "/api/v1/devices/test-runs/:id/artifacts/*",
      summary: "A device uploads an artifact of its share of a run, from ?offset= (its present size; 409 answers the right one)",
      tag: "test runs",
      access: "device",
      query: artifactUploadQuery,
      body: { media: "application/octet-stream" },
      responses: {
        200: ok(UploadOffset, "Stored"),
        400: errors[400],
        401: errors[401],
        403: { description: "Not a device token", json: errors[403].json },
        404: { description: "The device runs no share of this run (any more)", json: errors[404].json },
        409: { description: "The upload must continue at `offset`", json: UploadConflict },
        413: errors[413],
      },
    },
    auth.device(),
    async (c, { query: { offset } }) => {
      const identity = c.get("identity");
      if (identity.kind !== "device") throw new LabgateError("forbidden", "a device token is required");
      const name = artifactNameOf(c.req.path);
      const body = requestBodyStream(c) ?? Readable.from([]);
      try {
        const size = await service.deviceArtifact(c.req.param("id") ?? "", identity.mac, name, offset ?? 0, body);
        const answer: UploadOffset = { offset: size };
        return c.json(answer);
      } catch (error) {
        body.resume(); // drain what the device still sends
        throw error;
      }
    },
  );

  const postDevicesTestRunsByIdPower = route(
    app,
    {
      method: "post",
      path: "/api/v1/devices/test-runs/:id/power",
      summary: "A device's share switches its board's power (the power module), with the run's caller's power permission; answers once done",
      tag: "test runs",
      access: "device",
      body: { json: DevicePowerRequest },
      responses: {
        200: ok(DevicePowerDone, "Done"),
        400: errors[400],
        401: errors[401],
        403: { description: "Not a device token, or the run's caller may not switch the board", json: errors[403].json },
        404: { description: "The device runs no share of this run (any more)", json: errors[404].json },
        409: { description: "The device is not a board with a power port, or an action is under way", json: errors[409].json },
        502: errors[502],
      },
    },
    auth.device(),
    async (c, { body: { action } }) => {
      const identity = c.get("identity");
      if (identity.kind !== "device") throw new LabgateError("forbidden", "a device token is required");
      await service.devicePower(c.req.param("id") ?? "", identity.mac, action, clientAddress(c));
      const answer: DevicePowerDone = { action };
      return c.json(answer);
    },
  );

  // Node to node (src/cluster): a share of a run on another node whose device's socket is here, and back what its device sends.
  const peerOnly = (c: Context<AppEnv>) => {
    const identity = c.get("identity");
    if (identity.kind !== "mgmt" || identity.user !== PEER_USER) throw new LabgateError("forbidden", "only another node of the cluster calls this");
  };
  const postClusterTestShares = route(
    app,
    {
      method: "post",
      path: "/api/v1/cluster/test-shares",
      tag: "test runs",
      access: "management",
      summary: "Between the nodes of a cluster: start a device's share of a run on another node, the device's socket being on this one (a node's own token only)",
      body: { json: PeerShareStart },
      responses: { 200: ok(PeerShareStarted, "Started, or why not"), 400: errors[400], 401: errors[401], 403: errors[403], 404: errors[404] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      peerOnly(c);
      return c.json(await service.startRelayedShare(body));
    },
  );

  const postClusterTestMessages = route(
    app,
    {
      method: "post",
      path: "/api/v1/cluster/test-messages",
      tag: "test runs",
      access: "management",
      summary: "Between the nodes of a cluster: what the device of a share run here sent to the node holding its socket, or that the socket closed (a node's own token only)",
      body: { json: PeerShareMessages },
      responses: { 200: ok(), 400: errors[400], 401: errors[401], 403: errors[403], 404: errors[404] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      peerOnly(c);
      service.relayedShareMessages(body);
      return c.json({});
    },
  );

  const putClusterTestRunsByIdDevicesByMacArtifactsPath = route(
    app,
    {
      method: "put",
      path: "/api/v1/cluster/test-runs/:id/devices/:mac/artifacts/*",
      tag: "test runs",
      access: "management",
      summary: "Between the nodes of a cluster: an artifact upload of a device's share, from the node the device sent it to, written here or sent on to the run's node (a node's own token only)",
      query: artifactUploadQuery,
      body: { media: "application/octet-stream" },
      responses: { 200: ok(UploadOffset, "Stored"), 400: errors[400], 401: errors[401], 403: errors[403], 404: errors[404], 409: { description: "The upload must continue at `offset`", json: UploadConflict }, 413: errors[413] },
    },
    auth.management("admin_rw"),
    async (c, { query: { offset } }) => {
      peerOnly(c);
      const body = requestBodyStream(c) ?? Readable.from([]);
      try {
        const size = await service.deviceArtifact(c.req.param("id") ?? "", c.req.param("mac") ?? "", artifactNameOf(c.req.path), offset ?? 0, body, false);
        const answer: UploadOffset = { offset: size };
        return c.json(answer);
      } catch (error) {
        body.resume();
        throw error;
      }
    },
  );

  const postClusterTestRunsByIdDevicesByMacPower = route(
    app,
    {
      method: "post",
      path: "/api/v1/cluster/test-runs/:id/devices/:mac/power",
      tag: "test runs",
      access: "management",
      summary: "Between the nodes of a cluster: a device's share switches its board's power, from the node the device asked, done here or sent on to the run's node (a node's own token only)",
      body: { json: PeerPowerRequest },
      responses: { 200: ok(DevicePowerDone, "Done"), 400: errors[400], 401: errors[401], 403: errors[403], 404: errors[404], 409: errors[409], 502: errors[502] },
    },
    auth.management("admin_rw"),
    async (c, { body: { action, client } }) => {
      peerOnly(c);
      await service.devicePower(c.req.param("id") ?? "", c.req.param("mac") ?? "", action, client, false);
      const answer: DevicePowerDone = { action };
      return c.json(answer);
    },
  );

  const variantA = () => {
    const getTestTargets = route(
      app,
      {
        method: "get",
        path: "/api/v1/test-targets",
        ...doc,
        summary: "Where the caller may run tests on managed devices: devices (at most 1000, by name), groups and tags with the `test` permission",
        responses: replies({ 200: ok(TestTargets, "OK") }),
      },
      access.read,
      async (c) => {
        const targets = await testableTargets(ctx.store, c.get("identity"), ctx.config.prefix);
        const answer: TestTargets = { devices: targets.devices.map((d) => ({ name: d.name, mac_address: d.mac })), total: targets.total, groups: targets.groups, tags: targets.tags };
        return c.json(answer);
      },
    );

    const getConfigsByNameHistory = route(
      app,
      {
        method: "get",
        path: "/api/v1/configs/:name/history",
        ...doc,
        summary: "Each test's result per device over the config's newest runs on managed devices (rows paged, X-Total-Count)",
        query: historyQuery,
        responses: replies({ 200: { ...ok(DeviceTestHistory, "OK"), headers: { "X-Total-Count": "how many (device, test) rows in all" } }, 400: errors[400] }),
      },
      access.read,
      async (c, { query }) => {
        const name = c.req.param("name") ?? "";
        if (!isConfigName(name)) throw new LabgateError("invalid", "invalid config name");
        const sight = await service.sight(c.get("identity"));
        const history = await service.deviceHistory(name, query.runs ?? 10, { limit: query.limit ?? 100, offset: query.offset ?? 0 }, sight.macs);
        c.header("X-Total-Count", String(history.total));
        const answer: DeviceTestHistory = {
          runs: history.runs.map((r) => {
            const run = runObjectA(seenRun(r, sight).run);
            return { id: run.id, created_at: run.created_at, status: run.status, test_suite_name: run.test_suite_name, machine_target: run.machine_target };
          }),
          rows: history.rows.map((r) => ({ device: r.device, mac_address: r.mac, test_name: r.testName, name: r.name, results: r.results, ...trend(r.results) })),
        };
        return c.json(answer);
      },
    );
    return [getTestTargets, getConfigsByNameHistory] as const;
  };

  const onlyA = ctx.config.test_server.api_variant === "A" ? variantA() : [];
  return routes(app, putDevicesTestRunsByIdArtifactsPath, postDevicesTestRunsByIdPower, postClusterTestShares, postClusterTestMessages, putClusterTestRunsByIdDevicesByMacArtifactsPath, postClusterTestRunsByIdDevicesByMacPower, ...onlyA);
}
