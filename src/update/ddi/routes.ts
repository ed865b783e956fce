/*
 * hawkBit's Direct Device Integration API at hawkBit's paths, for an unchanged SWUpdate
 * (suricatta) or rauc-hawkbit-updater (its shapes: src/protocol/hawkbit/ddi.ts), and the
 * management of targets. Each handler parses, calls DdiTargets (./service.ts) and shapes the
 * answer; the device routes' errors are in hawkBit's shape, `{"exceptionClass", "errorCode", "message"}`.
 */
import { Hono, type Context } from "hono";
import type { z } from "zod";
import type { AppContext, AppEnv } from "../../app/context.ts";
import type { Auth } from "../../auth/middleware.ts";
import { actorOf } from "../../http/actor.ts";
import { answerOrInternal } from "../../http/errors.ts";
import { errors, jsonBody, ok, route, routes, objectRefusals, type Reply } from "../../http/openapi.ts";
import { publicBase } from "../../storage/routes.ts";
import { LabgateError } from "../../util/errors.ts";
import { ActionFeedback, CancelAction, ConfigData, ControllerBase, DdiError, DeploymentBase } from "../../protocol/hawkbit/ddi.ts";
import { NewTarget, TargetCredentials, TargetView } from "./schema.ts";
import type { DdiTargets } from "./service.ts";

const tag = "ddi";
const failed = (description: string): Reply => ({ description, json: DdiError });
const targetErrors = { 400: failed("Malformed request"), 401: failed("Unknown tenant or controller id, or not its target token") };
const actionErrors = { ...targetErrors, 404: failed("No such action for this target"), 409: failed("The action is closed already") };

/** hawkBit's names for the errors a target may meet, by status. */
const HAWKBIT_ERRORS: Record<number, { exceptionClass: string; errorCode: string }> = {
  400: { exceptionClass: "org.eclipse.hawkbit.rest.exception.MessageNotReadableException", errorCode: "hawkbit.server.error.rest.body.notReadable" },
  401: { exceptionClass: "org.springframework.security.authentication.BadCredentialsException", errorCode: "hawkbit.server.error.unauthorized" },
  404: { exceptionClass: "org.eclipse.hawkbit.repository.exception.EntityNotFoundException", errorCode: "hawkbit.server.error.repo.entitiyNotFound" },
  409: { exceptionClass: "org.eclipse.hawkbit.repository.exception.ActionStatusFeedbackNotAllowedException", errorCode: "hawkbit.server.error.repo.actionStatusFeedbackNotAllowed" },
  413: { exceptionClass: "org.eclipse.hawkbit.repository.exception.FileSizeQuotaExceededException", errorCode: "hawkbit.server.error.quota.fileSizeExceeded" },
  415: { exceptionClass: "org.springframework.web.HttpMediaTypeNotSupportedException", errorCode: "hawkbit.server.error.rest.body.mediaTypeNotSupported" },
  429: { exceptionClass: "org.eclipse.hawkbit.repository.exception.TooManyStatusEntriesException", errorCode: "hawkbit.server.error.quota.tooManyRequests" },
};
const OTHER_ERROR = { exceptionClass: "org.eclipse.hawkbit.exception.SpServerError", errorCode: "hawkbit.server.error" };

const actionId = (c: Context<AppEnv>): number => {
  const text = c.req.param("actionId") ?? "";
  if (!/^[0-9]{1,15}$/.test(text)) throw new LabgateError("not_found", `no action ${text.slice(0, 32)} for this target`);
  return Number(text);
};

/** The device routes of hawkBit's DDI API. */
export function ddiRoutes(ctx: AppContext, targets: DdiTargets): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.onError((error, c) => {
    const answer = answerOrInternal(error, ctx.log, `${c.req.method} ${c.req.path}`, { request_id: c.get("requestId"), method: c.req.method, path: c.req.path });
    const body: DdiError = { ...(HAWKBIT_ERRORS[answer.status] ?? OTHER_ERROR), message: answer.message };
    return c.json(body, answer.status);
  });
  // The target is known before its body is read: a request without its token is 401 whatever it sends.
  const target = (c: Context<AppEnv>) => targets.authenticate(c.req.param("tenant") ?? "", c.req.param("controllerId") ?? "", c.req.header("authorization"));

  route(
    app,
    {
      method: "get",
      path: "/:tenant/controller/v1/:controllerId",
      tag,
      access: "public",
      summary: "A DDI target polls (Authorization: TargetToken): how long to sleep, and its open action to install or cancel (labgate's update check opens one)",
      responses: { 200: { description: "The polling interval and links", json: ControllerBase }, ...targetErrors },
    },
    async (c) => c.json(await targets.poll(await target(c), publicBase(ctx, c)), 200),
  );
  route(
    app,
    {
      method: "get",
      path: "/:tenant/controller/v1/:controllerId/deploymentBase/:actionId",
      tag,
      access: "public",
      summary: "A DDI target's open action: one chunk whose artifact is the package (SHA-1, MD5, SHA-256, size, a signed download link)",
      responses: { 200: { description: "The deployment", json: DeploymentBase }, ...actionErrors },
    },
    async (c) => {
      const who = await target(c);
      return c.json(await targets.deploymentBase(who, actionId(c), publicBase(ctx, c)), 200);
    },
  );
  route(
    app,
    {
      method: "post",
      path: "/:tenant/controller/v1/:controllerId/deploymentBase/:actionId/feedback",
      tag,
      access: "public",
      summary: "A DDI target's feedback on its action: proceeding (downloading, installing), closed with success or failure (the deployment's outcome)",
      body: { json: ActionFeedback, parsedBy: "handler" },
      responses: { 200: { description: "Recorded" }, ...actionErrors },
    },
    async (c) => {
      const who = await target(c);
      await targets.feedback(who, actionId(c), await jsonBody(c, ActionFeedback));
      return c.body(null, 200);
    },
  );
  route(
    app,
    {
      method: "get",
      path: "/:tenant/controller/v1/:controllerId/cancelAction/:actionId",
      tag,
      access: "public",
      summary: "The cancel of a DDI target's open action (its deployment was aborted)",
      responses: { 200: { description: "The cancel", json: CancelAction }, ...actionErrors },
    },
    async (c) => {
      const who = await target(c);
      return c.json(await targets.cancelAction(who, actionId(c)), 200);
    },
  );
  route(
    app,
    {
      method: "post",
      path: "/:tenant/controller/v1/:controllerId/cancelAction/:actionId/feedback",
      tag,
      access: "public",
      summary: "A DDI target's feedback on a cancel: closed or canceled ends its action",
      body: { json: ActionFeedback, parsedBy: "handler" },
      responses: { 200: { description: "Recorded" }, ...actionErrors },
    },
    async (c) => {
      const who = await target(c);
      await targets.cancelFeedback(who, actionId(c), await jsonBody(c, ActionFeedback));
      return c.body(null, 200);
    },
  );
  route(
    app,
    {
      method: "put",
      path: "/:tenant/controller/v1/:controllerId/configData",
      tag,
      access: "public",
      summary: "A DDI target's attributes: they join the device's metadata (device_type sets its device type)",
      body: { json: ConfigData, parsedBy: "handler" },
      responses: { 200: { description: "Stored" }, ...targetErrors },
    },
    async (c) => {
      const who = await target(c);
      await targets.configData(who, await jsonBody(c, ConfigData));
      return c.body(null, 200);
    },
  );
  return app;
}

const controllerPath = (c: Context<AppEnv>) => decodeURIComponent(c.req.param("controllerId") ?? "");

/** The management of DDI targets: create one (its token shown once), see it, replace or revoke its token. */
export function ddiTargetRoutes(ctx: AppContext, auth: Auth, targets: DdiTargets) {
  const app = new Hono<AppEnv>();
  const write = { 400: errors[400], ...objectRefusals };
  const postTargets = route(
    app,
    {
      method: "post",
      path: "/api/v1/ddi/targets",
      tag,
      access: "management",
      summary: "Create a DDI target (a device for SWUpdate or RAUC): its device and target token, shown only in this answer",
      body: { json: NewTarget },
      responses: { 200: ok(TargetCredentials, "Created"), ...write, 409: errors[409] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => c.json(await targets.create(body as z.output<typeof NewTarget>, actorOf(c, ctx.clock)), 200),
  );
  const getTarget = route(
    app,
    { method: "get", path: "/api/v1/ddi/targets/:controllerId", tag, access: "management", summary: "A DDI target: its token's state and its recent actions", responses: { 200: ok(TargetView, "The target"), ...objectRefusals } },
    auth.management("admin_ro"),
    async (c) => c.json((await targets.view(controllerPath(c))) as z.output<typeof TargetView>, 200),
  );
  const postTargetToken = route(
    app,
    {
      method: "post",
      path: "/api/v1/ddi/targets/:controllerId/token",
      tag,
      access: "management",
      summary: "Replace a DDI target's token: the new one, shown only in this answer; the old one is refused from now on",
      responses: { 200: ok(TargetCredentials, "The new token"), ...objectRefusals },
    },
    auth.management("admin_rw"),
    async (c) => c.json(await targets.replaceToken(controllerPath(c), actorOf(c, ctx.clock)), 200),
  );
  const deleteTargetToken = route(
    app,
    { method: "delete", path: "/api/v1/ddi/targets/:controllerId/token", tag, access: "management", summary: "Revoke a DDI target's token: the target is refused until it gets a new one", responses: { 200: ok(), ...objectRefusals } },
    auth.management("admin_rw"),
    async (c) => {
      await targets.revokeToken(controllerPath(c), actorOf(c, ctx.clock));
      return c.json({}, 200);
    },
  );
  return routes(app, postTargets, getTarget, postTargetToken, deleteTargetToken);
}
