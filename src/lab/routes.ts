import { Hono } from "hono";
import * as z from "zod";
import { actorOf } from "../audit/audit.ts";
import type { Auth } from "../auth/middleware.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { errors, ok, onObject, route, routes } from "../http/openapi.ts";
import { pathId } from "../update/validation.ts";
import type { LabDomain } from "./domain.ts";
import type { PowerAction } from "./drivers.ts";
import { BoardView, ConsoleQuery, PowerState, ReservationCreate, ReservationState } from "./schema.ts";
import { readBoard, type BoardConfig } from "./config.ts";
import { Problem } from "../config/schema.ts";
import { LabgateError } from "../util/errors.ts";

const tag = "lab";
/** A board's body: a JSON object, read by lab.boards' own reader (readBoard) so the errors name the key. */
const BoardBody = z.record(z.string(), z.unknown(), { error: "expected a JSON object: {device, power, serial}" });

/** Board power (`power` on the device to switch), reservations (`test` or `power` to reserve) and consoles; `read` to look. */
export function labRoutes(ctx: AppContext, auth: Auth, lab: LabDomain) {
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
      responses: { 200: ok(PowerState, "OK"), ...onObject },
    },
    mgmt,
    (c) => c.json(lab.power.view(c.get("identity"), pathId(c.req.param("id"), "device"))),
  );

  const postDevicesByIdPowerByAction = route(
    app,
    {
      method: "post",
      path: "/api/v2/devices/:id{[0-9]+}/power/:action{on|off|cycle}",
      tag,
      access: "management",
      summary: "Switch a board's power on, off or cycle it (power on the device); answers once the PDU did it",
      responses: { 200: ok(PowerState, "Done"), ...onObject, 409: errors[409], 502: errors[502] },
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
    (c) => c.json(lab.reservations.list(c.get("identity"), ctx.clock.now())),
  );

  const getDevicesByIdReservation = route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/reservation",
      tag,
      access: "management",
      summary: "Who holds a device and until when (read on the device)",
      responses: { 200: ok(ReservationState, "OK"), ...onObject },
    },
    mgmt,
    (c) => c.json(lab.reservations.view(c.get("identity"), pathId(c.req.param("id"), "device"), ctx.clock.now())),
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
      responses: { 200: ok(ReservationState, "Reserved"), 400: errors[400], ...onObject, 409: errors[409] },
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
      responses: { 200: ok(ReservationState, "Released"), ...onObject },
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
        ...onObject,
        409: errors[409],
      },
    },
    mgmt,
    (c, { query: { since } }) => {
      const id = pathId(c.req.param("id"), "device");
      const view = lab.consoles.read(c.get("identity"), id, since ?? 0);
      c.header("X-Console-Start", String(view.start));
      c.header("X-Console-End", String(view.end));
      c.header("X-Console-Status", view.status.replace(/[^\x20-\x7e]/g, "?"));
      c.header("Content-Type", "text/plain; charset=utf-8");
      return c.body(new Uint8Array(view.bytes));
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

  return routes(app, getDevicesByIdPower, postDevicesByIdPowerByAction, getReservations, getDevicesByIdReservation, postDevicesByIdReservation, deleteDevicesByIdReservation, getDevicesByIdConsole, getLabBoards, postLabBoards, deleteLabBoardsByDevice);
}
