import { Hono, type MiddlewareHandler } from "hono";
import { upgradeWebSocket } from "@hono/node-server";
import type { WSContext } from "hono/ws";
import { recordAudit } from "../audit/audit.ts";
import * as z from "zod";
import { actorOf } from "../http/actor.ts";
import type { Auth } from "../auth/middleware.ts";
import type { AccessWatch } from "../auth/authority.ts";
import { CLOSE_UNAUTHORIZED } from "../update/channel/hub.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { errors, ok, objectRefusals, queryOf, route, routes } from "../http/openapi.ts";
import { pathId } from "../update/validation.ts";
import type { LabDomain } from "./domain.ts";
import type { PowerAction } from "./drivers.ts";
import { BoardView, ConsoleQuery, ConsoleSpan, DeploymentConsoleSpan, PowerState, ReservationCreate, ReservationState } from "./schema.ts";
import { readBoard, type BoardConfig } from "../config/lab.ts";
import { Problem } from "../config/schema.ts";
import { LabgateError } from "../util/errors.ts";

const tag = "lab";
/** Bytes one frame of the live console's input may carry (keystrokes and pasted lines, not files). */
export const MAX_CONSOLE_INPUT = 4096;
/** Close codes of the live console: input refused (too large, or the caller may only read). */
export const CLOSE_CONSOLE_INPUT = 4001;
export const CLOSE_READ_ONLY = 4003;
const ConsoleSocketQuery = z.object({ token: z.string().optional().describe("the management token, for browsers") });
/** A board's body: a JSON object, read by lab.boards' own reader (readBoard) so the errors name the key. */
const BoardBody = z.record(z.string(), z.unknown(), { error: "expected a JSON object: {device, power, serial}" });

/** Board power (`power` on the device to switch), reservations (`test` or `power` to reserve) and consoles; `read` to look. */
export function labRoutes(ctx: AppContext, auth: Auth, lab: LabDomain, accessWatch: AccessWatch) {
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  const getDevicesByIdPower = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/power",
      tag,
      access: "management",
      summary: "A board's last known power state and last action (read on the device; driver null: no power port)",
      responses: { 200: ok(PowerState, "OK"), ...objectRefusals },
    },
    mgmt,
    async (c) => c.json(await lab.power.view(c.get("identity"), pathId(c.req.param("id"), "device"))),
  );

  const postDevicesByIdPowerByAction = route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/:id{[0-9]+}/power/:action{on|off|cycle}",
      tag,
      access: "management",
      summary: "Switch a board's power on, off or cycle it (power on the device); answers once the PDU did it",
      responses: { 200: ok(PowerState, "Done"), ...objectRefusals, 409: errors[409], 502: errors[502] },
    },
    mgmt,
    async (c) => {
      const id = pathId(c.req.param("id"), "device");
      return c.json(await lab.power.act(c.get("identity"), actorOf(c, ctx.clock), id, c.req.param("action") as PowerAction));
    },
  );

  const getReservations = route(
    app,
    {
      method: "get",
      path: "/api/v2/reservations",
      tag,
      access: "management",
      summary: "The current reservations of the devices the caller may read",
      responses: { 200: ok(z.array(ReservationState), "OK"), 401: errors[401] },
    },
    mgmt,
    async (c) => c.json(await lab.reservations.list(c.get("identity"), ctx.clock.now())),
  );

  const getDevicesByIdReservation = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/reservation",
      tag,
      access: "management",
      summary: "Who holds a device and until when (read on the device)",
      responses: { 200: ok(ReservationState, "OK"), ...objectRefusals },
    },
    mgmt,
    async (c) => c.json(await lab.reservations.view(c.get("identity"), pathId(c.req.param("id"), "device"), ctx.clock.now())),
  );

  const postDevicesByIdReservation = route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/:id{[0-9]+}/reservation",
      tag,
      access: "management",
      summary: "Reserve a device for the caller, or refresh the caller's reservation (test or power on the device)",
      body: { json: ReservationCreate },
      responses: { 200: ok(ReservationState, "Reserved"), 400: errors[400], ...objectRefusals, 409: errors[409] },
    },
    mgmt,
    async (c, { body: { minutes, note } }) => {
      const id = pathId(c.req.param("id"), "device");
      return c.json(await lab.reservations.reserve(c.get("identity"), actorOf(c, ctx.clock), id, minutes, note));
    },
  );

  const deleteDevicesByIdReservation = route(
    app,
    {
      method: "delete",
      path: "/api/v2/devices/:id{[0-9]+}/reservation",
      tag,
      access: "management",
      summary: "Release the caller's reservation; an administrator breaks another's (audited)",
      responses: { 200: ok(ReservationState, "Released"), ...objectRefusals },
    },
    mgmt,
    async (c) => c.json(await lab.reservations.release(c.get("identity"), actorOf(c, ctx.clock), pathId(c.req.param("id"), "device"))),
  );

  const getDevicesByIdConsole = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/console",
      tag,
      access: "management",
      summary: "What a board's console printed (read on the device), from a byte offset",
      query: ConsoleQuery,
      responses: {
        200: {
          description: "The bytes kept from `since` on",
          media: "text/plain",
          headers: {
            "X-Console-Start": "the offset of the first byte in the answer",
            "X-Console-End": "the offset after the last: the next request's since",
            "X-Console-Status": "connected, or why the port is not read now",
          },
        },
        400: errors[400],
        ...objectRefusals,
        409: errors[409],
      },
    },
    mgmt,
    async (c, { query: { since } }) => {
      const id = pathId(c.req.param("id"), "device");
      const view = await lab.consoles.read(c.get("identity"), id, since ?? 0);
      c.header("X-Console-Start", String(view.start));
      c.header("X-Console-End", String(view.end));
      c.header("X-Console-Status", view.status.replace(/[^\x20-\x7e]/g, "?"));
      c.header("Content-Type", "text/plain; charset=utf-8");
      return c.body(new Uint8Array(view.bytes));
    },
  );

  // The live console: what the board prints as binary frames; what the caller sends goes to the
  // port when it holds `shell` on the device. A browser cannot set headers: the token may come as ?token=.
  const socketAuth: MiddlewareHandler<AppEnv> = async (c, next) => {
    const { token } = queryOf(c, ConsoleSocketQuery);
    c.set("identity", await auth.authenticate(c, "mgmt", token !== undefined ? `Bearer token=${token}` : undefined));
    await next();
  };
  const getDevicesByIdConsoleWs = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/console/ws",
      tag,
      access: "management",
      summary: "The board's console live (read on the device); what the caller sends is written to the port with shell on the device, at most 4096 bytes a frame",
      websocket: true,
      query: ConsoleSocketQuery,
      responses: { 101: { description: "Upgraded" }, ...objectRefusals, 409: errors[409], 426: { description: "Not a WebSocket upgrade", json: errors[400].json } },
    },
    socketAuth,
    async (c, next) => {
      // Refused before the upgrade: no such device, no read on it, no console port.
      await lab.consoles.live(c.get("identity"), pathId(c.req.param("id"), "device"));
      if (c.req.header("upgrade")?.toLowerCase() !== "websocket") throw new LabgateError("upgrade_required", "this route expects a WebSocket upgrade");
      await next();
    },
    upgradeWebSocket(async (c) => {
      const identity = c.get("identity");
      const id = pathId(c.req.param("id"), "device");
      const actor = actorOf(c, ctx.clock);
      const view = await lab.consoles.live(identity, id);
      let stop: (() => void) | undefined;
      let unwatch = () => {};
      let written = 0;
      return {
        onOpen: (_event, ws: WSContext) => {
          stop = view.follow((chunk) => ws.send(new Uint8Array(chunk)));
          // A token, an account or a permission taken away ends the session (writing needs shell to stay).
          if (identity.kind === "mgmt") {
            unwatch = accessWatch.watch(identity, { end: (reason) => ws.close(CLOSE_UNAUTHORIZED, reason), check: (current) => lab.consoles.mayFollow(current, id, view.writable) });
          }
        },
        onMessage: (event, ws: WSContext) => {
          if (!stop) return;
          const bytes = typeof event.data === "string" ? Buffer.from(event.data) : event.data instanceof ArrayBuffer ? Buffer.from(event.data) : undefined;
          if (!bytes) return;
          if (!view.writable) return ws.close(CLOSE_READ_ONLY, "read-only: writing to this console needs the shell permission on the device");
          if (bytes.length > MAX_CONSOLE_INPUT) return ws.close(CLOSE_CONSOLE_INPUT, `input frames are limited to ${MAX_CONSOLE_INPUT} bytes`);
          try {
            view.write(bytes);
            written += bytes.length;
          } catch (error) {
            ws.close(CLOSE_CONSOLE_INPUT, (error as Error).message.slice(0, 120));
          }
        },
        onClose: () => {
          stop?.();
          stop = undefined;
          unwatch();
          // Who typed on a board's console, and how much (the bytes themselves are on the console).
          if (written > 0) void recordAudit(ctx.store.query, { ...actor, at: new Date(ctx.clock.now()) }, "console.write", `device:${id}`, { bytes: written }).catch((error: Error) => ctx.log.warn(`lab: console.write of device ${id} not audited: ${error.message}`));
        },
      };
    }),
  );

  const getDevicesByIdConsoleSpans = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/console-spans",
      tag,
      access: "management",
      summary: "The device's update attempts with a console span (read on the device, as its update history), newest first",
      responses: { 200: ok(z.array(ConsoleSpan), "OK"), ...objectRefusals },
    },
    mgmt,
    async (c) => c.json(await lab.spans.list(c.get("identity"), pathId(c.req.param("id"), "device"))),
  );

  const getDeploymentsByIdConsoleSpans = route(
    app,
    {
      method: "get",
      path: "/api/v2/deployments/:id{[0-9]+}/console-spans",
      tag,
      access: "management",
      summary: "The console spans of a deployment's attempts on boards, of the devices the caller may read (as their update history), newest first",
      responses: { 200: ok(z.array(DeploymentConsoleSpan), "OK"), 400: errors[400], 401: errors[401] },
    },
    mgmt,
    async (c) => c.json(await lab.spans.ofDeployment(c.get("identity"), pathId(c.req.param("id"), "deployment"))),
  );

  const getDevicesByIdUpdateHistoryByEntryConsole = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/update-history/:entry{[0-9]+}/console",
      tag,
      access: "management",
      summary: "What the board's console printed during one update attempt, from its offer to its outcome and the boot after (read on the device)",
      responses: { 200: { description: "The span", media: "text/plain" }, ...objectRefusals },
    },
    mgmt,
    async (c) => {
      const bytes = await lab.spans.read(c.get("identity"), pathId(c.req.param("id"), "device"), pathId(c.req.param("entry"), "history entry"));
      c.header("Content-Type", "text/plain; charset=utf-8");
      return c.body(new Uint8Array(bytes));
    },
  );

  // A plug's password is not shown (svc_admin_ro reads this list).
  const viewOf = (board: BoardConfig, source: "config" | "api") => ({
    ...board,
    ...(board.power && "password" in board.power && board.power.password !== undefined ? { power: { ...board.power, password: "(set)" } } : {}),
    source,
  });

  const getLabBoards = route(
    app,
    { method: "get", path: "/api/v2/lab/boards", tag, access: "management", summary: "The board map: lab.boards and the boards set through the API (svc_admin_rw or svc_admin_ro)", responses: { 200: ok(z.array(BoardView), "OK"), 401: errors[401], 403: errors[403] } },
    auth.management("admin_rw", "admin_ro"),
    (c) => c.json(lab.boards.list().map((e) => viewOf(e.board, e.source))),
  );

  const postLabBoards = route(
    app,
    {
      method: "post",
      path: "/api/v2/lab/boards",
      tag,
      access: "management",
      summary: "Set a board ({device, power, serial}, as in lab.boards; svc_admin_rw); a board of the config file is a 409",
      body: { json: BoardBody },
      responses: { 200: ok(BoardView, "Set"), 400: errors[400], 401: errors[401], 403: errors[403], 409: errors[409] },
    },
    auth.management("admin_rw"),
    async (c, { body }) => {
      let board: BoardConfig;
      try {
        board = readBoard(body);
      } catch (error) {
        if (!(error instanceof Problem)) throw error;
        throw new LabgateError("invalid", `${error.path.length ? `${error.path.join(".")}: ` : ""}${error.what}`);
      }
      const entry = await lab.boards.set(board, actorOf(c, ctx.clock));
      return c.json(viewOf(entry.board, entry.source));
    },
  );

  const deleteLabBoardsByDevice = route(
    app,
    {
      method: "delete",
      path: "/api/v2/lab/boards/:device",
      tag,
      access: "management",
      summary: "Remove a board set through the API (by its device: MAC address or name; svc_admin_rw)",
      responses: { 200: ok(), 401: errors[401], 403: errors[403], 404: errors[404], 409: errors[409] },
    },
    auth.management("admin_rw"),
    async (c) => {
      await lab.boards.remove(c.req.param("device") ?? "", actorOf(c, ctx.clock));
      return c.json({});
    },
  );

  return routes(app, getDevicesByIdPower, postDevicesByIdPowerByAction, getReservations, getDevicesByIdReservation, postDevicesByIdReservation, deleteDevicesByIdReservation, getDevicesByIdConsole, getDevicesByIdConsoleWs, getDevicesByIdConsoleSpans, getDeploymentsByIdConsoleSpans, getDevicesByIdUpdateHistoryByEntryConsole, getLabBoards, postLabBoards, deleteLabBoardsByDevice);
}
