import { num, optional, paramSchema } from "./params.ts";
import { pass, type ModuleDef } from "./types.ts";

/** `sleep`: waits, then passes; an abort interrupts the wait at once. */
export const sleepModule: ModuleDef = {
  key: "sleep",
  className: "TestSleepRPC",
  summary: "Waits, then passes (pauses between hardware steps).",
  params: paramSchema(() => ({ seconds: optional("number", "how long to wait", 10) })),
  validate: (p) => ((num(p, "seconds", 10) ?? 0) < 0 ? "parameter 'seconds': must not be negative" : undefined),
  deviceName: () => "Sleep Test",
  cases: () => [
    {
      name: "sleep",
      async run(ctx) {
        // An abort ends the wait; the runner reports the case as aborted.
        await ctx.sleep(num(ctx.params, "seconds", 10)! * 1000);
        return pass();
      },
    },
  ],
};
