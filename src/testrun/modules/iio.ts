import { posix } from "node:path";
import { assertion, boardPathError, exists, readAttribute, writeAttribute } from "./hardware.ts";
import { given, num, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, skip, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

const DEFAULT_ADC = "/sys/bus/iio/devices/iio:device0";
const CHANNEL = /^[A-Za-z0-9_]+$/;

const sysfsPath = (ctx: Pick<EntryContext, "params">, fallback?: string) => str(ctx.params, "sysfs_path", fallback)!;
const channelError = (p: Record<string, unknown>) => (given(p, "channel") && !CHANNEL.test(String(p.channel)) ? "parameter 'channel': expected a channel such as 0 or 0_vcc" : undefined);

/** `adc`: an ADC channel through the IIO sysfs interface (protoplaster's `adc`, same cases and messages). */
export const adcModule: ModuleDef = {
  key: "adc",
  className: "TestADC",
  summary: "An ADC channel of an IIO device: present, its name, `raw` × `scale` within bounds; protoplaster's `adc`.",
  params: paramSchema(() => ({
    sysfs_path: optional("string", "the IIO device directory", DEFAULT_ADC),
    channel: optional("string", "the part between `in_voltage` and `_raw`, such as `0` or `0_vcc`", 0),
    device_name: optional("string", "expected content of the device's `name` file"),
    min_voltage: optional("number", "lowest allowed `raw` × `scale` (millivolts, per the IIO ABI)"),
    max_voltage: optional("number", "highest allowed `raw` × `scale`"),
  })),
  validate: (p) => (given(p, "sysfs_path") ? boardPathError(p.sysfs_path, "sysfs_path", ["/sys"]) : undefined) ?? channelError(p),
  deviceName: (ctx) => `ADC(${sysfsPath(ctx, DEFAULT_ADC)})`,
  cases: () => [
    {
      name: "is_alive",
      run: async (ctx) => ((await exists(ctx, sysfsPath(ctx, DEFAULT_ADC))) ? pass() : assertion("ADC does not respond correctly")),
    },
    {
      name: "device_name",
      async run(ctx) {
        if (!given(ctx.params, "device_name")) return skip("device_name parameter not set");
        // protoplaster compares the untrimmed file and so never matches; the trimmed name is what was meant.
        const name = await readAttribute(ctx, posix.join(sysfsPath(ctx, DEFAULT_ADC), "name"));
        return name === str(ctx.params, "device_name") ? pass() : assertion("The device name is not correct");
      },
    },
    {
      name: "read_adc",
      async run(ctx) {
        const dir = sysfsPath(ctx, DEFAULT_ADC);
        const channel = str(ctx.params, "channel", "0");
        const read = async (what: string) => {
          const text = await readAttribute(ctx, posix.join(dir, `in_voltage${channel}_${what}`));
          return text === undefined || text === "" || Number.isNaN(Number(text)) ? undefined : Number(text);
        };
        const raw = await read("raw");
        const scale = await read("scale");
        if (raw === undefined) return fail(`cannot read ${dir}/in_voltage${channel}_raw`);
        if (scale === undefined) return fail(`cannot read ${dir}/in_voltage${channel}_scale`);
        const voltage = raw * scale;
        const max = num(ctx.params, "max_voltage");
        const min = num(ctx.params, "min_voltage");
        if (max !== undefined && voltage > max) return assertion("The voltage is above the maximum allowed value.");
        if (min !== undefined && voltage < min) return assertion("The voltage is below the minimum allowed value.");
        return pass();
      },
    },
  ],
};

/** `dac`: a DAC's sysfs interface (protoplaster's `dac`), and optionally a raw value written and read back. */
export const dacModule: ModuleDef = {
  key: "dac",
  className: "TestDAC",
  summary: "A DAC's sysfs interface is there, and optionally a raw value written reads back; protoplaster's `dac`.",
  params: paramSchema(() => ({
    sysfs_path: required("string", "the DAC's sysfs directory, such as `/sys/bus/iio/devices/iio:device1`"),
    channel: optional("string", "with `value`: the part between `out_voltage` and `_raw`", 0),
    value: optional("integer", "a raw value written to `out_voltage<channel>_raw` and read back (adds the `write_read` case)"),
  })),
  validate: (p) => boardPathError(p.sysfs_path, "sysfs_path", ["/sys"]) ?? channelError(p),
  deviceName: (ctx) => `DAC(${sysfsPath(ctx)})`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "sysfs_interface",
        run: async (ctx) => ((await exists(ctx, sysfsPath(ctx))) ? pass() : assertion("Provided DAC path doesn't exist")),
      },
    ];
    if (given(params, "value"))
      cases.push({
        name: "write_read",
        async run(ctx) {
          const name = `out_voltage${str(ctx.params, "channel", "0")}_raw`;
          const file = posix.join(sysfsPath(ctx), name);
          const value = num(ctx.params, "value")!;
          try {
            await writeAttribute(ctx, file, String(value));
          } catch (error) {
            return fail(`cannot write ${sysfsPath(ctx)}/${name}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
          }
          const back = await readAttribute(ctx, file);
          return back === String(value) ? pass() : fail(`read back ${back ?? "nothing"} from ${sysfsPath(ctx)}/${name}, wrote ${value}`);
        },
      });
    return cases;
  },
};
