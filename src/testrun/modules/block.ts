import { boardPath, exists, firstLine, readAttribute, runTool, toolProblem } from "./hardware.ts";
import { given, num, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, type CaseDef, type EntryContext, type ModuleDef, type Params } from "./types.ts";

const MIB = 1024 * 1024;
const SIZE = /^(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?$/i;
const UNITS: Record<string, number> = { "": 1, K: 1024, M: MIB, G: 1024 * MIB, T: 1024 * 1024 * MIB };

/** `32G`, `512M`, `1.5T` (binary units) or a number of bytes. */
const bytesOf = (v: unknown): number => {
  const m = SIZE.exec(String(v).trim());
  return m ? Number(m[1]) * UNITS[m[2]!.toUpperCase()]! : NaN;
};
/** `mmcblk0` whether the config writes `mmcblk0` or `/dev/mmcblk0`. */
const deviceOf = (p: Params) => str(p, "device")!.replace(/^\/dev\//, "");
const sysBlock = (ctx: EntryContext, ...parts: string[]) => ["/sys/block", deviceOf(ctx.params), ...parts].join("/");
const gib = (n: number) => `${(n / (1024 * MIB)).toFixed(2)} GiB`;

/** Reads the first `mib` MiB of a device with dd (coreutils), as every tool a module runs; the bytes read and the MB/s, or why not. */
async function readSpeed(ctx: EntryContext, mib: number): Promise<{ read: number; mbps: number } | string> {
  const device = `/dev/${deviceOf(ctx.params)}`;
  if (!(await exists(ctx, device))) return `cannot read ${device}: no such device`;
  const started = performance.now();
  const r = await runTool(ctx, ["dd", `if=${await boardPath(ctx.roots, device)}`, "of=/dev/null", "bs=1M", `count=${mib}`], 600);
  const seconds = Math.max((performance.now() - started) / 1000, 1e-6);
  const problem = toolProblem(r, 600) ?? (r.exitCode !== 0 ? `cannot read ${device}: ${firstLine(r.stderr).replace(/^dd: /, "")}` : undefined);
  if (problem) return problem;
  // `16777216 bytes (17 MB, 16 MiB) copied, 0.0123 s, 1.4 GB/s`: the byte count from dd, the time measured here (dd's own rounding varies).
  const read = Number(/^(\d+) bytes/m.exec(r.stderr)?.[1] ?? 0);
  return { read, mbps: read / 1e6 / seconds };
}

const blockModule = (key: string, className: string, example: string, summary: string): ModuleDef => ({
  key,
  className,
  summary,
  params: paramSchema(() => ({
    device: required("string", `the block device, such as \`${example}\` or \`/dev/${example}\``),
    min_size: optional("scalar", "smallest allowed size: bytes, or with K, M, G, T (binary units)"),
    max_size: optional("scalar", "largest allowed size"),
    type: optional("string", "expected `device/type` (`MMC`, `SD`, `SDIO` for MMC devices)"),
    read_mib: optional("integer", "MiB read from the start of the device for `min_read_mbps`", 16),
    min_read_mbps: optional("number", "lowest allowed read speed in MB/s (adds the `read_speed` case)"),
  })),
  validate(p) {
    if (!/^(\/dev\/)?[A-Za-z0-9_.-]+$/.test(String(p.device)) || /^(\/dev\/)?\.\.?$/.test(String(p.device))) return "parameter 'device': expected a block device name";
    for (const k of ["min_size", "max_size"]) if (given(p, k) && Number.isNaN(bytesOf(p[k]))) return `parameter '${k}': expected a size such as 32G or a number of bytes`;
    if (given(p, "read_mib") && num(p, "read_mib")! < 1) return "parameter 'read_mib': expected at least 1";
    return undefined;
  },
  deviceName: ({ params }) => `/dev/${deviceOf(params)}`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "exists",
        run: async (ctx) => ((await exists(ctx, sysBlock(ctx))) ? pass() : fail(`no block device /sys/block/${deviceOf(ctx.params)}`)),
      },
    ];
    if (given(params, "min_size") || given(params, "max_size"))
      cases.push({
        name: "size",
        async run(ctx) {
          const sectors = Number(await readAttribute(ctx, sysBlock(ctx, "size")));
          if (!Number.isFinite(sectors)) return fail(`cannot read /sys/block/${deviceOf(ctx.params)}/size`);
          // The kernel counts 512-byte sectors whatever the device's block size.
          const size = sectors * 512;
          if (given(ctx.params, "min_size") && size < bytesOf(ctx.params.min_size)) return fail(`size ${gib(size)} (${size} bytes) is less than ${ctx.params.min_size}`);
          if (given(ctx.params, "max_size") && size > bytesOf(ctx.params.max_size)) return fail(`size ${gib(size)} (${size} bytes) is more than ${ctx.params.max_size}`);
          return pass();
        },
      });
    if (given(params, "type"))
      cases.push({
        name: "type",
        async run(ctx) {
          const type = await readAttribute(ctx, sysBlock(ctx, "device", "type"));
          return type === str(ctx.params, "type") ? pass() : fail(`device type is ${type ?? "unknown"}, expected ${str(ctx.params, "type")}`);
        },
      });
    if (given(params, "min_read_mbps"))
      cases.push({
        name: "read_speed",
        async run(ctx) {
          const wanted = num(ctx.params, "read_mib", 16)! * MIB;
          const min = num(ctx.params, "min_read_mbps")!;
          const result = await readSpeed(ctx, wanted / MIB);
          if (typeof result === "string") return fail(result);
          if (result.read < wanted) return fail(`/dev/${deviceOf(ctx.params)} ended after ${result.read} bytes, ${wanted} wanted`);
          return result.mbps >= min ? pass() : fail(`read ${wanted / MIB} MiB at ${result.mbps.toFixed(1)} MB/s, less than ${min} MB/s`);
        },
      });
    return cases;
  },
});

/** `mmc`: an MMC/SD card or eMMC as a block device: present, size, type, read speed. */
export const mmcModule = blockModule("mmc", "TestMMC", "mmcblk0", "An MMC/SD card or eMMC: present, its size and type, and a read of its first MiBs fast enough.");
/** `block`: the same checks for any block device (SATA, NVMe, USB storage). */
export const blockDeviceModule = blockModule("block", "TestBlock", "sda", "The `mmc` checks for any block device (SATA, NVMe, USB storage).");
