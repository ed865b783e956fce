import { assertion, boardPath, kindOf, readAttribute, runTool, toolFailure, toolProblem, writeAttribute } from "./hardware.ts";
import { bool, choice, given, num, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, type EntryContext, type ModuleDef, type Outcome, type Params } from "./types.ts";


/** `gpiochip0` whether the config writes `0`, `gpiochip0` or `/dev/gpiochip0`. */
const chipName = (p: Params) => {
  const chip = str(p, "chip")!.replace(/^\/dev\//, "");
  return /^\d+$/.test(chip) ? `gpiochip${chip}` : chip;
};

const mismatch = (write: boolean, want: number, got: unknown) =>
  write ? assertion(`Incorrect value read back after write. Expected: ${want}, Actual: ${got}`) : assertion(`Read value mismatch. Expected: ${want}, Actual: ${got}`);

/** The reference's flow: export when the line's directory is missing (and unexport after, only then), set the direction, read or write `value`. */
async function viaSysfs(ctx: EntryContext): Promise<Outcome> {
  const p = ctx.params;
  const base = "/sys/class/gpio";
  const number = num(p, "number")!;
  const dir = `${base}/${str(p, "gpio_name", `gpio${number}`)}`;
  const write = bool(p, "write", false)!;
  const want = num(p, "value")!;
  let unexport = false;
  if ((await kindOf(ctx, dir)) !== "dir") {
    if ((await kindOf(ctx, `${base}/export`)) !== "file") return assertion("Sysfs interface for GPIO does not exist");
    await writeAttribute(ctx, `${base}/export`, String(number));
    unexport = true;
  }
  try {
    if ((await kindOf(ctx, dir)) !== "dir") return assertion("GPIO could not be initiated");
    await writeAttribute(ctx, `${dir}/direction`, write ? "out" : "in");
    if (write) await writeAttribute(ctx, `${dir}/value`, String(want));
    const text = await readAttribute(ctx, `${dir}/value`);
    if (text === undefined) return fail(`cannot read ${dir}/value`);
    const got = /^-?\d+$/.test(text) ? Number(text) : text;
    return got === want ? pass() : mismatch(write, want, got);
  } finally {
    if (unexport) await writeAttribute(ctx, `${base}/unexport`, String(number)).catch(() => undefined);
  }
}

/** libgpiod's tools on the character device: version 1 (`gpioget CHIP LINE`) and 2 (`gpioget -c CHIP LINE`) differ. */
async function viaGpiod(ctx: EntryContext): Promise<Outcome> {
  const p = ctx.params;
  const chip = await boardPath(ctx.roots, `/dev/${chipName(p)}`);
  const line = str(p, "line")!;
  const write = bool(p, "write", false)!;
  const want = num(p, "value")!;
  const version = await runTool(ctx, ["gpioget", "--version"]);
  const problem = toolProblem(version);
  if (problem) return fail(problem);
  const v2 = /\bv?2\.\d/.test(version.stdout);
  const run = async (argv: string[]): Promise<string | Outcome> => {
    const r = await runTool(ctx, argv);
    const why = toolFailure(r, argv[0]!);
    return why ? fail(why) : r.stdout;
  };
  if (write) {
    const set = await run(v2 ? ["gpioset", "-t0", "-c", chip, `${line}=${want}`] : ["gpioset", chip, `${line}=${want}`]);
    if (typeof set !== "string") return set;
  }
  // After a write, read without changing the direction where the tools can (version 2's --as-is).
  const out = await run(v2 ? ["gpioget", "--numeric", ...(write ? ["--as-is"] : []), "-c", chip, line] : ["gpioget", chip, line]);
  if (typeof out !== "string") return out;
  const text = out.trim().split("\n").pop()!.trim();
  const got = /^\d+$/.test(text) ? Number(text) : text;
  return got === want ? pass() : mismatch(write, want, got);
}

const usesSysfs = async (ctx: EntryContext) => {
  const method = str(ctx.params, "method");
  if (method) return method === "sysfs";
  if (!given(ctx.params, "chip")) return true;
  return given(ctx.params, "number") && (await kindOf(ctx, "/sys/class/gpio/export")) === "file";
};

/** `gpio`: read a line, or drive it and read it back (protoplaster's `gpio`; labgate adds the character device). */
export const gpioModule: ModuleDef = {
  key: "gpio",
  className: "TestGPIO",
  summary: "A GPIO line reads a value, or is driven and read back: sysfs (`/sys/class/gpio`) or the character device through libgpiod's `gpioget`/`gpioset` (package gpiod); protoplaster's `gpio`.",
  params: paramSchema(() => ({
    number: optional("integer", "the line's number in the sysfs interface (`/sys/class/gpio`)"),
    value: required("integer", "0 or 1: the value expected, or written with `write`"),
    write: optional("boolean", "drive the line to `value` and read it back, instead of reading it", false),
    gpio_name: optional("string", "the line's sysfs directory after export", "gpio<number>"),
    test_name: optional("string", "the report's device name", "/sys/class/gpio/<number>"),
    chip: optional("string", "the GPIO chip for libgpiod's tools: `0`, `gpiochip0` or `/dev/gpiochip0`"),
    line: optional("string", "with `chip`: the line's offset or name"),
    method: choice(["sysfs", "gpiod"], "how the line is reached", "sysfs when /sys/class/gpio/export exists and `number` is given, else gpiod"),
  })),
  validate(p) {
    if (num(p, "value") !== 0 && num(p, "value") !== 1) return "parameter 'value': expected 0 or 1";
    const sysfs = given(p, "number");
    const gpiod = given(p, "chip") && given(p, "line");
    if (!sysfs && !gpiod) return "give 'number' (sysfs) or 'chip' and 'line' (libgpiod)";
    if (str(p, "method") === "sysfs" && !sysfs) return "method sysfs needs 'number'";
    if (str(p, "method") === "gpiod" && !gpiod) return "method gpiod needs 'chip' and 'line'";
    if (given(p, "gpio_name") && !/^[^/\0]+$/.test(String(p.gpio_name))) return "parameter 'gpio_name': expected a directory name";
    if (given(p, "chip") && !/^(\/dev\/)?[A-Za-z0-9_.-]+$/.test(String(p.chip))) return "parameter 'chip': expected a chip number, name or /dev path";
    // Passed to gpioget as an argument: a name, never an option.
    if (given(p, "line") && !/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/.test(String(p.line))) return "parameter 'line': expected a line offset or name";
    return undefined;
  },
  deviceName: ({ params }) => str(params, "test_name") ?? (given(params, "number") ? `/sys/class/gpio/${num(params, "number")}` : `${chipName(params)}/${str(params, "line")}`),
  cases: () => [
    {
      name: "read_write",
      async run(ctx) {
        try {
          return (await usesSysfs(ctx)) ? await viaSysfs(ctx) : await viaGpiod(ctx);
        } catch (error) {
          return fail(`${(error as NodeJS.ErrnoException).code ?? "error"}: ${(error as Error).message}`);
        }
      },
    },
  ],
};
