/**
 * The lab API's shapes, each once: lab/routes.ts registers them with the routes (the OpenAPI
 * document shows them), the console imports the types.
 */
import * as z from "zod";

export const PowerState = z
  .object({
    device_id: z.int(),
    driver: z.string().describe("the board's power driver (lab.boards)"),
    state: z.enum(["on", "off", "unknown"]).describe("what the last successful action left the port in; unknown before the first"),
    last_action: z
      .object({ action: z.enum(["on", "off", "cycle"]), by: z.string().describe("the account or token user"), at: z.string().describe("ISO 8601") })
      .nullable(),
    busy: z.boolean().describe("an action on this board is under way"),
    may_switch: z.boolean().describe("the caller holds power on the device (or svc_admin_rw)"),
  })
  .meta({ id: "PowerState" });
export type PowerState = z.infer<typeof PowerState>;
