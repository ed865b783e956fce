import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { assertion, boardPath, fileType, firstLine, removeRunFile, TOOL_PACKAGES, toolFailure, toolProblem } from "./hardware.ts";
import { bool, optional, paramSchema, required, num } from "./params.ts";
import { fail, pass, skip, type EntryContext, type ModuleDef, type Outcome } from "./types.ts";

/** The reference's pattern: every byte value once, 0 to 255. */
const PATTERN = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
/** The pattern as printf escapes, so the test's user writes the bytes themselves (no encoding on the way). */
const PATTERN_ESCAPES = [...PATTERN].map((b) => `\\${b.toString(8).padStart(3, "0")}`).join("");

const node = (ctx: Pick<EntryContext, "params">) => `/dev/spidev${num(ctx.params, "bus")}.${num(ctx.params, "device")}`;

/** The transfer tools in the order tried: the kernel's spidev_test, else spi-tools' spi-pipe (Debian has no spidev_test). */
const TOOLS = ["spidev_test", "spi-pipe"] as const;

/** The first of TOOLS on the test's PATH; undefined when none (or why the lookup itself failed). */
async function transferTool(ctx: EntryContext): Promise<{ tool?: (typeof TOOLS)[number]; problem?: string }> {
  const r = await ctx.exec({ command: ["/bin/sh", "-c", 'for t; do command -v "$t" >/dev/null 2>&1 && { echo "$t"; exit 0; }; done; exit 1', "sh", ...TOOLS], timeoutMs: 10_000 });
  const problem = toolProblem(r, 10);
  if (problem) return { problem };
  const tool = TOOLS.find((t) => t === r.stdout.trim());
  return tool ? { tool } : {};
}

/** Sends PATTERN through `device` with `tool`, the answer into `received`; undefined when done, else why not. */
async function transfer(ctx: EntryContext, tool: (typeof TOOLS)[number], device: string, sent: string, received: string, timeout: number): Promise<string | undefined> {
  const argv =
    tool === "spidev_test"
      ? ["spidev_test", "-D", device, "-i", sent, "-o", received]
      : // spi-pipe moves stdin to the bus and the bus's answer to stdout: one block of the pattern's size.
        ["/bin/sh", "-c", 'exec spi-pipe -d "$1" -b "$2" -n 1 < "$3" > "$4"', "sh", device, String(PATTERN.length), sent, received];
  const r = await ctx.exec({ command: argv, timeoutMs: timeout * 1000 });
  return toolFailure(r, tool, timeout);
}

/** `spi`: a spidev node is there and loops a pattern back (protoplaster's `spi`, same case and message). */
export const spiModule: ModuleDef = {
  key: "spi",
  className: "TestSPI",
  summary: "A spidev device node is there and loops a 256-byte pattern back (`spidev_test`, else `spi-pipe` of package spi-tools); protoplaster's `spi`.",
  params: paramSchema(() => ({
    bus: required("integer", "the SPI bus: `/dev/spidev<bus>.<device>`"),
    device: required("integer", "the chip select on the bus"),
    loopback: optional("boolean", "send the pattern and compare what comes back (needs MISO wired to MOSI)", true),
    timeout: optional("number", "seconds the transfer may take", 30),
  })),
  validate: (p) => (["bus", "device"] as const).map((k) => ((p[k] as number) < 0 ? `parameter '${k}': expected a number from 0` : undefined)).find(Boolean),
  deviceName: node,
  cases: () => [
    {
      name: "exists",
      async run(ctx) {
        const type = await fileType(ctx, node(ctx));
        if (type === undefined) return assertion(`${node(ctx)} does not exist`);
        return type === "char" ? pass() : assertion(`${node(ctx)} is not a character device (${type})`);
      },
    },
    {
      name: "loopback",
      async run(ctx): Promise<Outcome> {
        if (!bool(ctx.params, "loopback", true)) return skip("loopback parameter is false");
        // The tool does the I/O and is given the device path: a missing node is its error to report.
        const device = await boardPath(ctx.roots, node(ctx));
        const found = await transferTool(ctx);
        if (found.problem) return fail(found.problem);
        if (!found.tool) return fail(`${TOOLS.join(" and ")} not found: install the Debian package ${TOOL_PACKAGES["spi-pipe"]}`);
        const id = randomUUID();
        const [sent, received] = [`.spi-sent-${id}`, `.spi-received-${id}`];
        const timeout = num(ctx.params, "timeout", 30)!;
        try {
          const write = await ctx.exec({ command: ["/bin/sh", "-c", 'printf "$1" > "$2"', "sh", PATTERN_ESCAPES, join(ctx.artifactsDir, sent)], timeoutMs: 10_000 });
          const unwritten = toolFailure(write, "printf", 10);
          if (unwritten) return fail(`cannot write the pattern: ${unwritten}`);
          const problem = await transfer(ctx, found.tool, device, join(ctx.artifactsDir, sent), join(ctx.artifactsDir, received), timeout);
          if (problem) return fail(problem);
          // cmp: 0 the same, 1 different, 2 trouble (a short answer is "different": EOF is reported on stderr with 1).
          const same = await ctx.exec({ command: ["cmp", "-s", "--", join(ctx.artifactsDir, sent), join(ctx.artifactsDir, received)], timeoutMs: 10_000 });
          if (same.exitCode === 0) return pass();
          if (same.exitCode === 1) return assertion("SPI device does not loop back");
          return fail(`cannot compare what came back: ${toolProblem(same, 10) ?? firstLine(same.stderr)}`);
        } finally {
          await removeRunFile(ctx, sent);
          await removeRunFile(ctx, received);
        }
      },
    },
  ],
};
