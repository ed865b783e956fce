import { describeExit, type ProcessResult } from "../../util/process.ts";
import { num, optional, paramSchema, required, str } from "./params.ts";
import { CaseFailure, fail, pass, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

interface PingResult {
  loss: number;
  avgMs?: number;
}

/** Reads `N% packet loss` and `min/avg/max` from iputils or busybox ping output. */
export function parsePing(output: string): PingResult | undefined {
  const loss = /([\d.]+)% packet loss/.exec(output);
  if (!loss) return undefined;
  const rtt = /=\s*([\d.]+)\/([\d.]+)\/([\d.]+)/.exec(output);
  return { loss: Number(loss[1]), ...(rtt ? { avgMs: Number(rtt[2]) } : {}) };
}

const result = (ctx: EntryContext) => ctx.state.result as PingResult;

/** `ping`: reachability with the system ping. */
export const pingModule: ModuleDef = {
  key: "ping",
  className: "TestPing",
  summary: "Reachability and round-trip time with the system `ping`.",
  params: paramSchema(() => ({
    host: required("string", "host name or address"),
    name: optional("string", "the report's device name", "ping(<host>)"),
    count: optional("integer", "echo requests sent", 3),
    timeout: optional("number", "seconds for all of them", 10),
    max_loss_percent: optional("number", "the packet loss allowed", 0),
    max_rtt_ms: optional("number", "the highest average round trip allowed (adds the `rtt` case)"),
  })),
  validate: (p) => (/^[A-Za-z0-9.:_-]+$/.test(String(p.host)) && !String(p.host).startsWith("-") ? undefined : "parameter 'host': expected a host name or address"),
  deviceName: ({ params }) => str(params, "name") ?? `ping(${str(params, "host")})`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "reachable",
        run(ctx) {
          const max = num(ctx.params, "max_loss_percent", 0)!;
          const loss = result(ctx).loss;
          return loss <= max ? pass() : fail(`${loss}% packet loss, at most ${max}% allowed`);
        },
      },
    ];
    if (num(params, "max_rtt_ms") !== undefined)
      cases.push({
        name: "rtt",
        run(ctx) {
          const avg = result(ctx).avgMs;
          const max = num(ctx.params, "max_rtt_ms")!;
          if (avg === undefined) return fail("no round-trip time measured");
          return avg <= max ? pass() : fail(`average round-trip ${avg} ms, more than ${max} ms`);
        },
      });
    return cases;
  },
  async setup(ctx) {
    const p = ctx.params;
    const count = num(p, "count", 3)!;
    const timeout = num(p, "timeout", 10)!;
    // argv, no shell; -w is the overall deadline.
    const r: ProcessResult = await ctx.exec({
      command: ["ping", "-n", "-c", String(count), "-w", String(Math.max(1, Math.ceil(timeout))), str(p, "host")!],
      timeoutMs: (timeout + 5) * 1000,
    });
    if (r.startError || r.aborted || r.timedOut) throw new CaseFailure(describeExit(r, (timeout + 5) * 1000));
    const parsed = parsePing(r.stdout + r.stderr);
    if (!parsed) throw new CaseFailure(`ping failed: ${(r.stderr || r.stdout).trim().split("\n")[0] || describeExit(r)}`);
    ctx.state.result = parsed;
  },
};
