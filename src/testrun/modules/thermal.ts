import { boardPathError, listDir, readAttribute } from "./hardware.ts";
import { given, num, optional, paramSchema, str } from "./params.ts";
import { fail, pass, type EntryContext, type ModuleDef, type Params } from "./types.ts";

const NAME = /^[^/\0]+$/;

/** The sensor file as the config names it (`/sys/...`), found in set-up for `zone` and `hwmon`. */
async function findSensor(ctx: EntryContext): Promise<string | undefined> {
  const p = ctx.params;
  if (given(p, "path")) return str(p, "path");
  if (given(p, "zone")) {
    for (const zone of await listDir(ctx, "/sys/class/thermal")) {
      if (zone.startsWith("thermal_zone") && (await readAttribute(ctx, `/sys/class/thermal/${zone}/type`)) === str(p, "zone")) return `/sys/class/thermal/${zone}/temp`;
    }
    return undefined;
  }
  for (const hwmon of await listDir(ctx, "/sys/class/hwmon")) {
    if ((await readAttribute(ctx, `/sys/class/hwmon/${hwmon}/name`)) === str(p, "hwmon")) return `/sys/class/hwmon/${hwmon}/${str(p, "sensor", "temp1")}_input`;
  }
  return undefined;
}

const where = (p: Params) => (given(p, "path") ? str(p, "path")! : given(p, "zone") ? `thermal zone ${str(p, "zone")}` : `hwmon ${str(p, "hwmon")} ${str(p, "sensor", "temp1")}`);

/** `thermal`: a temperature from a thermal zone or hwmon sensor within a range (no protoplaster counterpart). */
export const thermalModule: ModuleDef = {
  key: "thermal",
  className: "TestThermal",
  summary: "A temperature from a thermal zone or hwmon sensor is within a range.",
  params: paramSchema(() => ({
    path: optional("string", "the sensor file, such as `/sys/class/thermal/thermal_zone0/temp`"),
    zone: optional("string", "instead of `path`: the thermal zone whose `type` is this (`cpu-thermal`)"),
    hwmon: optional("string", "instead of `path`: the hwmon device whose `name` is this (`tmp431`)"),
    sensor: optional("string", "with `hwmon`: the sensor", "temp1"),
    scale: optional("number", "factor from the file's value to degrees (the kernel writes millidegrees)", 0.001),
    min: optional("number", "lowest allowed temperature"),
    max: optional("number", "highest allowed temperature"),
    name: optional("string", "the report's device name", "the path or sensor"),
  })),
  validate(p) {
    const ways = ["path", "zone", "hwmon"].filter((k) => given(p, k));
    if (ways.length !== 1) return "give exactly one of 'path', 'zone' and 'hwmon'";
    if (given(p, "path")) {
      const bad = boardPathError(p.path, "path", ["/sys"]);
      if (bad) return bad;
    }
    for (const k of ["zone", "hwmon", "sensor"]) if (given(p, k) && !NAME.test(String(p[k]))) return `parameter '${k}': expected a name`;
    return undefined;
  },
  deviceName: ({ params }) => str(params, "name") ?? where(params),
  cases: () => [
    {
      name: "range",
      async run(ctx) {
        const sensor = ctx.state.sensor as string | undefined;
        if (!sensor) return fail(`no ${where(ctx.params)}`);
        const text = await readAttribute(ctx, sensor);
        if (text === undefined || text === "" || Number.isNaN(Number(text))) return fail(`cannot read a temperature from ${sensor}`);
        const value = Number(text) * num(ctx.params, "scale", 0.001)!;
        const shown = Number(value.toFixed(3));
        const min = num(ctx.params, "min");
        const max = num(ctx.params, "max");
        if (min !== undefined && value < min) return fail(`${shown} is below the minimum ${min}`);
        if (max !== undefined && value > max) return fail(`${shown} is above the maximum ${max}`);
        return pass();
      },
    },
  ],
  async setup(ctx) {
    ctx.state.sensor = await findSensor(ctx);
  },
};
