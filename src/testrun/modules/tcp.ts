import { connect, type Socket } from "node:net";
import { after } from "../../util/time.ts";
import { choice, num, optional, paramSchema, regexError, required, str } from "./params.ts";
import { fail, pass, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

const READ_LIMIT = 64 * 1024;

interface TcpResult {
  open: boolean;
  error?: string;
  received: string;
}

/** Connects, optionally sends, and reads until `read_timeout` or the peer closes. */
function probe(ctx: EntryContext): Promise<TcpResult> {
  const p = ctx.params;
  const host = str(p, "host")!;
  const port = num(p, "port")!;
  const timeoutMs = num(p, "timeout", 5)! * 1000;
  const readMs = num(p, "read_timeout", 2)! * 1000;
  const wantsResponse = p.send !== undefined || p.expect_regex !== undefined;
  return new Promise((resolve) => {
    let socket: Socket | undefined;
    let done = false;
    let received = "";
    let connected = false;
    const deadlines: Array<() => void> = [];
    const finish = (r: TcpResult) => {
      if (done) return;
      done = true;
      for (const cancel of deadlines) cancel();
      ctx.signal.removeEventListener("abort", onAbort);
      socket?.destroy();
      resolve(r);
    };
    const onAbort = () => finish({ open: connected, error: "Aborted by user", received });
    ctx.signal.addEventListener("abort", onAbort, { once: true });
    socket = connect({ host, port });
    // `timeout` bounds the connect only; once connected, `read_timeout` bounds the answer.
    const connectDeadline = after(ctx.clock, timeoutMs, () => finish({ open: false, error: `connect timed out after ${timeoutMs / 1000} s`, received }));
    deadlines.push(connectDeadline);
    socket.on("connect", () => {
      connected = true;
      connectDeadline();
      if (!wantsResponse) return finish({ open: true, received });
      if (p.send !== undefined && p.send !== null) socket!.write(String(p.send));
      deadlines.push(after(ctx.clock, readMs, () => finish({ open: true, received })));
    });
    socket.on("data", (chunk: Buffer) => {
      if (received.length < READ_LIMIT) received += chunk.toString("utf8");
      const regex = str(p, "expect_regex");
      if (regex && new RegExp(regex, "m").test(received)) finish({ open: true, received });
    });
    socket.on("end", () => finish({ open: connected, received }));
    socket.on("error", (error: NodeJS.ErrnoException) => finish({ open: connected, error: error.code ?? error.message, received }));
  });
}

/** `tcp`: a TCP port check. */
export const tcpModule: ModuleDef = {
  key: "tcp",
  className: "TestTcp",
  summary: "A TCP port accepts (or refuses) connections, optionally answering as expected.",
  params: paramSchema(() => ({
    host: required("string", "host name or address"),
    port: required("integer", "TCP port, 1 to 65535"),
    name: optional("string", "the report's device name", "tcp(<host>:<port>)"),
    timeout: optional("number", "seconds to connect", 5),
    expect: choice(["open", "closed"], "whether the port should accept a connection", "open"),
    send: optional("string", "text sent once connected"),
    expect_regex: optional("string", "regular expression what is received must match (adds the `response` case)"),
    read_timeout: optional("number", "seconds to read the response", 2),
  })),
  validate: (p) => ((num(p, "port")! < 1 || num(p, "port")! > 65535) ? "parameter 'port': expected 1 to 65535" : regexError(p, "expect_regex")),
  deviceName: ({ params }) => str(params, "name") ?? `tcp(${str(params, "host")}:${num(params, "port")})`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "connect",
        run(ctx) {
          const r = ctx.state.result as TcpResult;
          const want = str(ctx.params, "expect", "open");
          if (want === "open") return r.open ? pass() : fail(`connection failed: ${r.error ?? "closed"}`);
          return r.open ? fail("port is open, expected closed") : pass();
        },
      },
    ];
    if (str(params, "expect", "open") === "open" && (params.send !== undefined || params.expect_regex !== undefined))
      cases.push({
        name: "response",
        run(ctx) {
          const r = ctx.state.result as TcpResult;
          if (!r.open) return fail(`connection failed: ${r.error ?? "closed"}`);
          const regex = str(ctx.params, "expect_regex");
          if (regex !== undefined && !new RegExp(regex, "m").test(r.received)) return fail(`response ${JSON.stringify(r.received.slice(0, 200))} does not match /${regex}/`);
          return pass();
        },
      });
    return cases;
  },
  async setup(ctx) {
    ctx.state.result = await probe(ctx);
  },
};
