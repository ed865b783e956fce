import { posix } from "node:path";
import { assertion, boardPathError, exists, firmwareExists, readAttribute, writeAttribute } from "./hardware.ts";
import { paramSchema, required, str } from "./params.ts";
import { pass, type EntryContext, type ModuleDef } from "./types.ts";

const iface = (ctx: Pick<EntryContext, "params">) => str(ctx.params, "sysfs_interface")!;

/**
 * `fpga`: load a bitstream through the kernel's fpga_manager (protoplaster's `fpga`, same cases).
 * Instead of asking an operator whether the bitstream works, the manager's `state` must read
 * `operating` after the load.
 */
export const fpgaModule: ModuleDef = {
  key: "fpga",
  className: "TestFPGA",
  summary: "Loads a bitstream through the kernel's fpga_manager and checks it reports `operating`; protoplaster's `fpga` without the operator prompt.",
  params: paramSchema(() => ({
    sysfs_interface: required("string", "the manager's `firmware` attribute, such as `/sys/class/fpga_manager/fpga0/firmware`"),
    bitstream_path: required("string", "the bitstream's name below the firmware directory (`/lib/firmware`)"),
  })),
  validate: (p) => boardPathError(p.sysfs_interface, "sysfs_interface", ["/sys"]) ?? (String(p.bitstream_path).split("/").includes("..") ? "parameter 'bitstream_path': '..' is not allowed" : undefined),
  deviceName: (ctx) => iface(ctx),
  cases: () => [
    {
      name: "sysfs_interface",
      run: async (ctx) => ((await exists(ctx, iface(ctx))) ? pass() : assertion(`${iface(ctx)} does not exist`)),
    },
    {
      name: "flashing_bitstream",
      async run(ctx) {
        const bitstream = str(ctx.params, "bitstream_path")!;
        if (!(await firmwareExists(ctx, bitstream))) return assertion("Bitstream file does not exist");
        try {
          await writeAttribute(ctx, iface(ctx), bitstream);
        } catch {
          return assertion("The bitstream failed to flash");
        }
        const stateFile = posix.join(posix.dirname(iface(ctx)), "state");
        const state = await readAttribute(ctx, stateFile);
        return state === "operating" ? pass() : assertion(`${stateFile} is '${state ?? "unreadable"}' after the load, expected 'operating'`);
      },
    },
  ],
};
