import { assertion, exists, readAttribute } from "./hardware.ts";
import { bool, choice, given, num, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, skip, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

const iface = (ctx: Pick<EntryContext, "params">) => str(ctx.params, "interface")!;
const attribute = (ctx: EntryContext, name: string) => readAttribute(ctx, `/sys/class/net/${iface(ctx)}/${name}`);

/** A labgate check of one attribute, reported only when its parameter is given. */
const attributeCase = (name: string, file: string, check: (ctx: EntryContext, value: string) => string | undefined): CaseDef => ({
  name,
  async run(ctx) {
    const value = await attribute(ctx, file);
    if (value === undefined) return fail(`cannot read /sys/class/net/${iface(ctx)}/${file}`);
    const problem = check(ctx, value);
    return problem ? fail(problem) : pass();
  },
});

/** `network`: a network interface in /sys/class/net (protoplaster's `network`, same cases and messages, plus optional checks). */
export const networkModule: ModuleDef = {
  key: "network",
  className: "TestNetwork",
  summary: "A network interface exists, its link speed, and optionally its state, carrier, MTU and MAC address; protoplaster's `network`.",
  params: paramSchema(() => ({
    interface: required("string", "interface name, such as `eth0`"),
    speed: optional("integer", "link speed in Mb/s (`/sys/class/net/IF/speed`)"),
    state: choice(["up", "down", "unknown", "dormant", "lowerlayerdown", "notpresent", "testing"], "operational state (`operstate`)"),
    carrier: optional("boolean", "whether a cable or link partner is present (`carrier`)"),
    mtu: optional("integer", "MTU in bytes"),
    mac: optional("string", "hardware address, compared case-insensitively"),
  })),
  validate: (p) => (/^[^/\0]+$/.test(String(p.interface)) && p.interface !== "." && p.interface !== ".." ? undefined : "parameter 'interface': expected an interface name"),
  deviceName: ({ params }) => str(params, "interface")!,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "exist",
        run: async (ctx) => ((await exists(ctx, `/sys/class/net/${iface(ctx)}`)) ? pass() : assertion(`No interface found: ${iface(ctx)}`)),
      },
      {
        name: "speed",
        async run(ctx) {
          if (!given(ctx.params, "speed")) return skip("speed parameter not set");
          const text = await attribute(ctx, "speed");
          // The kernel refuses to read the speed of a link that is down.
          const speed = text !== undefined && /^-?\d+$/.test(text) ? Number(text) : undefined;
          if (speed === undefined) return assertion(`Could not read speed for ${iface(ctx)} (is link down?)`);
          const want = num(ctx.params, "speed")!;
          return speed === want ? pass() : assertion(`Expected speed ${want}, but got ${speed}`);
        },
      },
    ];
    if (given(params, "state"))
      cases.push(attributeCase("state", "operstate", (ctx, v) => (v === str(ctx.params, "state") ? undefined : `operstate is ${v}, expected ${str(ctx.params, "state")}`)));
    if (given(params, "carrier"))
      cases.push(
        attributeCase("carrier", "carrier", (ctx, v) => {
          const want = bool(ctx.params, "carrier")!;
          return (v === "1") === want ? undefined : want ? "no carrier (is the cable plugged in?)" : "carrier present, expected none";
        }),
      );
    if (given(params, "mtu")) cases.push(attributeCase("mtu", "mtu", (ctx, v) => (Number(v) === num(ctx.params, "mtu") ? undefined : `MTU is ${v}, expected ${num(ctx.params, "mtu")}`)));
    if (given(params, "mac"))
      cases.push(attributeCase("mac", "address", (ctx, v) => (v.toLowerCase() === str(ctx.params, "mac")!.toLowerCase() ? undefined : `MAC address is ${v}, expected ${str(ctx.params, "mac")}`)));
    return cases;
  },
};
