import { Hono } from "hono";
import { actorOf } from "../audit/audit.ts";
import type { Auth } from "../auth/middleware.ts";
import type { AppContext, AppEnv } from "../app/context.ts";
import { errors, ok, onObject, route } from "../http/openapi.ts";
import { pathId } from "../update/validation.ts";
import type { LabDomain } from "./domain.ts";
import type { PowerAction } from "./drivers.ts";
import { PowerState } from "./schema.ts";

const tag = "lab";

/** Board power (and, in the lab domain, reservations and consoles): `power` on the device to switch, `read` to look. */
export function labRoutes(ctx: AppContext, auth: Auth, lab: LabDomain): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const mgmt = auth.management();

  route(
    app,
    {
      method: "get",
      path: "/api/v2/devices/:id{[0-9]+}/power",
      tag,
      access: "management",
      summary: "A board's last known power state and last action (read on the device)",
      responses: { 200: ok(PowerState, "OK"), ...onObject, 409: errors[409] },
    },
    mgmt,
    (c) => c.json(lab.power.view(c.get("identity"), pathId(c.req.param("id"), "device"))),
  );

  route(
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

  return app;
}
