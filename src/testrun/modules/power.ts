import { choice, num, optional, paramSchema, str } from "./params.ts";
import { fail, pass, skip, type ModuleDef } from "./types.ts";

const ACTIONS = ["on", "off", "cycle"] as const;

/**
 * `power`: switches the power of the board the share runs on (docs/lab.md), through the gateway
 * with the run's caller's `power` permission, then waits `wait` seconds (a board booting).
 * Elsewhere (a run here or on a lab node) there is no board: the case is skipped.
 */
export const powerModule: ModuleDef = {
  key: "power",
  className: "TestPower",
  summary: "Switches the power of the board a run on devices runs on (on, off, cycle) through the gateway's lab (docs/lab.md), with the `power` permission of the run's caller, then waits; skipped in runs elsewhere.",
  params: paramSchema(() => ({
    action: choice(ACTIONS, "what to do with the board's power port"),
    wait: optional("number", "seconds to wait afterwards (a board booting)", 0),
  })),
  validate: (p) =>
    p.action === undefined || p.action === null ? "parameter 'action' is required" : (num(p, "wait", 0) ?? 0) < 0 ? "parameter 'wait': must not be negative" : undefined,
  deviceName: (ctx) => `Power ${str(ctx.params, "action") ?? ""}`.trim(),
  cases: () => [
    {
      name: "power",
      async run(ctx) {
        const action = str(ctx.params, "action") as (typeof ACTIONS)[number];
        // A config shared with runs elsewhere (here, a lab node) has no board to switch there.
        if (!ctx.power) return skip("the power module switches a board: it runs only in a run on managed devices (machines: device:...)");
        try {
          await ctx.power(action);
        } catch (error) {
          return fail(`power ${action}: ${(error as Error).message}`);
        }
        await ctx.sleep(num(ctx.params, "wait", 0)! * 1000);
        return pass();
      },
    },
  ],
};
