import { assertion, exists, firstLine, hex, integerOf, runTool, toolProblem } from "./hardware.ts";
import { choice, given, isMapping, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, type CaseDef, type EntryContext, type ModuleDef, type Params } from "./types.ts";


const BUS_ERROR = /Could not open file|Permission denied/;

/** The bus as i2c-tools take it: `1` for `1`, `/dev/i2c-1` or `i2c-1`; a bus name as written. */
const busArg = (p: Params): string => {
  const bus = str(p, "bus")!;
  return /^(\/dev\/)?i2c-(\d+)$/.exec(bus)?.[2] ?? bus;
};
const busError = (p: Params) => (/^[A-Za-z0-9_./:-]+$/.test(str(p, "bus") ?? "") && !String(p.bus).startsWith("-") ? undefined : "parameter 'bus': expected a bus number or /dev/i2c-N");
const addressError = (v: unknown, what: string) => {
  const n = integerOf(v);
  return Number.isInteger(n) && n >= 0 && n <= 0x7f ? undefined : `${what}: expected a 7-bit address such as 0x1c`;
};

/** A client with a bound kernel driver: `/sys/bus/i2c/devices/<bus>-00<addr>/driver`. */
const sysfsClient = (bus: string, address: number) => `/sys/bus/i2c/devices/${bus}-${address.toString(16).padStart(4, "0")}`;
const boundDriver = (ctx: EntryContext, bus: string, address: number) => exists(ctx, `${sysfsClient(bus, address)}/driver`);

/** `i2c`: each listed address answers on the bus (protoplaster's `i2c`: a forced one-byte read per address). */
export const i2cModule: ModuleDef = {
  key: "i2c",
  className: "TestI2C",
  summary: "Each listed address answers on an I2C bus (`i2cget -y -f`, package i2c-tools; without it, a bound kernel driver); protoplaster's `i2c`.",
  params: paramSchema(() => ({
    bus: required("scalar", "bus number, or `/dev/i2c-N`"),
    devices: required("list", "the devices: `{name, address}` each"),
    method: choice(["probe", "sysfs"], "`probe`: `i2cget -y -f BUS ADDR` (reads from the device); `sysfs`: a kernel driver is bound at the address", "probe, then sysfs where i2c-tools are missing"),
  })),
  validate(p) {
    const problem = busError(p);
    if (problem) return problem;
    const devices = p.devices as unknown[];
    if (devices.length === 0) return "parameter 'devices': expected at least one device";
    for (const [i, d] of devices.entries()) {
      if (!isMapping(d) || !given(d, "address")) return `parameter 'devices.${i}': expected {name, address}`;
      const bad = addressError(d.address, `parameter 'devices.${i}.address'`);
      if (bad) return bad;
    }
    return undefined;
  },
  deviceName: ({ params }) => (typeof params.bus === "number" ? `/dev/i2c-${params.bus}` : str(params, "bus")!),
  cases: () => [
    {
      name: "addresses",
      async run(ctx) {
        const bus = busArg(ctx.params);
        const method = str(ctx.params, "method");
        for (const device of ctx.params.devices as Params[]) {
          const address = integerOf(device.address);
          // The reference prints the address as YAML gave it (a number in decimal).
          const missing = (why?: string) => assertion(`No device found at address: ${String(device.address)}${why ? ` (${why})` : ""}`);
          if (method !== "sysfs") {
            const r = await runTool(ctx, ["i2cget", "-y", "-f", bus, hex(address)]);
            const problem = toolProblem(r);
            if (!problem) {
              if (r.exitCode === 0) continue;
              // A bus that cannot be opened says nothing about the device: its reason, not "no device".
              if (BUS_ERROR.test(r.stderr)) return fail(firstLine(r.stderr));
              return missing();
            }
            if (method === "probe" || !r.startError?.includes("not found")) return fail(problem);
            // Without i2c-tools, a driver bound at the address is the evidence left.
            if (await boundDriver(ctx, bus, address)) continue;
            return missing(`${problem}; no driver bound at ${sysfsClient(bus, address)}`);
          }
          if (!(await boundDriver(ctx, bus, address))) return missing(`no driver bound at ${sysfsClient(bus, address)}`);
        }
        return pass();
      },
    },
  ],
};

interface Register {
  register: number;
  value: number;
  mask: number;
  name: string;
}

const CASE_NAME = /^[A-Za-z0-9_]+$/;
const registersOf = (p: Params): Register[] =>
  (p.registers as Params[]).map((r) => {
    const register = integerOf(r.register);
    return { register, value: integerOf(r.value), mask: given(r, "mask") ? integerOf(r.mask) : str(p, "size") === "w" ? 0xffff : 0xff, name: given(r, "name") ? String(r.name) : `register_${hex(register)}` };
  });

/** `i2c_registers`: registers of a chip read expected values (chip-ID checks as protoplaster's TMP431 and DA9062 modules do them). */
export const i2cRegistersModule: ModuleDef = {
  key: "i2c_registers",
  className: "TestI2CRegisters",
  summary: "Registers of an I2C chip read expected values under a mask (chip-ID checks), one row per register; `i2cget` from i2c-tools.",
  params: paramSchema(() => ({
    bus: required("scalar", "bus number, or `/dev/i2c-N`"),
    address: required("scalar", "the chip's 7-bit address"),
    registers: required("list", "`{register, value, mask, name}` each: `value` is compared with the read byte (or word) under `mask`; `name` names the case"),
    size: choice(["b", "w"], "`b`: read a byte, `w`: a 16-bit word", "b"),
    name: optional("string", "the report's device name", "i2c(<bus>, <address>)"),
  })),
  validate(p) {
    const problem = busError(p) ?? addressError(p.address, "parameter 'address'");
    if (problem) return problem;
    const list = p.registers as unknown[];
    if (list.length === 0) return "parameter 'registers': expected at least one register";
    const names = new Set<string>();
    const max = str(p, "size") === "w" ? 0xffff : 0xff;
    for (const [i, r] of list.entries()) {
      if (!isMapping(r) || !given(r, "register") || !given(r, "value")) return `parameter 'registers.${i}': expected {register, value}`;
      for (const key of ["register", "value", "mask"]) {
        const n = integerOf(r[key]);
        if (given(r, key) && !(Number.isInteger(n) && n >= 0 && n <= (key === "register" ? 0xff : max))) return `parameter 'registers.${i}.${key}': expected an integer from 0 to ${hex(key === "register" ? 0xff : max)}`;
      }
      if (given(r, "name") && !CASE_NAME.test(String(r.name))) return `parameter 'registers.${i}.name': expected letters, digits and _`;
    }
    for (const r of registersOf(p)) {
      if (names.has(r.name)) return `parameter 'registers': two cases named '${r.name}'`;
      names.add(r.name);
    }
    return undefined;
  },
  deviceName: ({ params }) => str(params, "name") ?? `i2c(${busArg(params)}, ${hex(integerOf(params.address))})`,
  cases: ({ params }) =>
    registersOf(params).map(
      (reg): CaseDef => ({
        name: reg.name,
        async run(ctx) {
          const size = str(ctx.params, "size", "b")!;
          const r = await runTool(ctx, ["i2cget", "-y", "-f", busArg(ctx.params), hex(integerOf(ctx.params.address)), hex(reg.register), size]);
          const problem = toolProblem(r);
          if (problem) return fail(problem);
          if (r.exitCode !== 0) return fail(`register ${hex(reg.register)}: i2cget exited with status ${r.exitCode}: ${firstLine(r.stderr)}`);
          const read = integerOf(r.stdout.trim());
          if (Number.isNaN(read)) return fail(`register ${hex(reg.register)}: i2cget printed ${JSON.stringify(r.stdout.trim().slice(0, 80))}`);
          const digits = size === "w" ? 4 : 2;
          if ((read & reg.mask) === (reg.value & reg.mask)) return pass();
          return fail(`register ${hex(reg.register)} reads ${hex(read, digits)}, expected ${hex(reg.value, digits)}${reg.mask !== (size === "w" ? 0xffff : 0xff) ? ` under mask ${hex(reg.mask, digits)}` : ""}`);
        },
      }),
    ),
};
