import { assertion, boardPath, boardPathError, runTool, toolProblem } from "./hardware.ts";
import { given, num, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, type ModuleDef } from "./types.ts";


/** `memtester`: the memtester program passes (protoplaster's `memtester`, same command line and message). */
export const memtesterModule: ModuleDef = {
  key: "memtester",
  className: "TestDMA",
  summary: "memtester (package memtester) finds no memory error; protoplaster's `memtester`.",
  params: paramSchema(() => ({
    memory: required("string", "how much memory to test, as memtester takes it (`10M`, `1G`)"),
    iterations: optional("integer", "loops", 1),
    physaddr: optional("string", "test the memory at this physical address (`-p`)"),
    device: optional("string", "with `physaddr`: the device to map it from (`-d`)", "/dev/mem"),
    timeout: optional("number", "seconds memtester may run", 3600),
  })),
  validate: (p) => (given(p, "device") ? boardPathError(p.device, "device", ["/dev"]) : undefined) ?? (/^\d+[BKMG]?$/i.test(String(p.memory)) ? (given(p, "physaddr") && !/^(0x)?[0-9a-f]+$/i.test(String(p.physaddr)) ? "parameter 'physaddr': expected a hex address" : undefined) : "parameter 'memory': expected a size such as 10M"),
  deviceName: ({ params }) => str(params, "device") ?? "/dev/mem",
  cases: () => [
    {
      name: "memory",
      async run(ctx) {
        const p = ctx.params;
        const timeout = num(p, "timeout", 3600)!;
        // As the reference: the device only counts with a physical address.
        const argv = ["memtester"];
        if (given(p, "physaddr")) argv.push("-p", str(p, "physaddr")!, ...(given(p, "device") ? ["-d", await boardPath(ctx.roots, str(p, "device")!)] : []));
        argv.push(str(p, "memory")!, String(num(p, "iterations", 1)));
        const r = await runTool(ctx, argv, timeout);
        const problem = toolProblem(r, timeout);
        if (problem) return fail(problem);
        return r.exitCode === 0 ? pass() : assertion(`Memory error was detected by memtester - return code: ${r.exitCode}`);
      },
    },
  ],
};
