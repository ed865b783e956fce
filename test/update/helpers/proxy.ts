import { createServer, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { connect } from "node:net";
import type { AddressInfo } from "node:net";

export interface SeenRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
}

/**
 * An HTTP proxy in front of the server (WebSocket upgrades are piped through). `cutAfter` makes
 * the first response to a matching GET stop after that many body bytes, as a broken link would;
 * `corrupt` flips a bit in the first matching response (the first `times` ones); `upgrades`: the
 * WebSockets go to that server instead, as a load balancer may put a device's socket on one node
 * and its requests on another.
 */
export async function startProxy(target: string, options: { cut?: { path: RegExp; after: number }; corrupt?: { path: RegExp; times?: number }; upgrades?: string } = {}) {
  const { hostname, port } = new URL(target);
  const sockets = new URL(options.upgrades ?? target);
  const seen: SeenRequest[] = [];
  let cut = options.cut;
  let corrupt = options.corrupt;
  let corruptLeft = options.corrupt?.times ?? 1;
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? "", path: req.url ?? "", headers: req.headers });
    const upstream = httpRequest({ host: hostname, port, method: req.method, path: req.url, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      if (corrupt && req.method === "GET" && corrupt.path.test(req.url ?? "")) {
        if (--corruptLeft <= 0) corrupt = undefined; // flip one bit of the first chunk
        let flipped = false;
        up.on("data", (chunk: Buffer) => {
          if (!flipped && chunk.length > 0) {
            chunk = Buffer.from(chunk);
            chunk[0] ^= 1;
            flipped = true;
          }
          res.write(chunk);
        });
        up.on("end", () => res.end());
        return;
      }
      const rule = cut && req.method === "GET" && cut.path.test(req.url ?? "") ? cut : undefined;
      if (!rule) return void up.pipe(res);
      cut = undefined; // only the first one
      let sent = 0;
      up.on("data", (chunk: Buffer) => {
        const room = rule.after - sent;
        if (room > 0) res.write(chunk.subarray(0, room));
        sent += chunk.length;
        if (sent >= rule.after) {
          up.destroy();
          res.socket?.destroy();
        }
      });
    });
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  server.on("upgrade", (req, socket, head) => {
    const upstream = connect(Number(sockets.port), sockets.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`, ...Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => `${k}: ${x}`) : [`${k}: ${v}`]))];
      upstream.write(lines.join("\r\n") + "\r\n\r\n");
      upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on("error", () => socket.destroy());
    socket.on("error", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
