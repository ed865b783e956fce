/**
 * Simulated devices for bench:sockets, one process of many: the device side of the WebSocket
 * protocol (update-server.md 13) and nothing else. Each opens /api/v1/devices/ws with its token,
 * reports the action capability, answers action_list_query with the built-in update-check action
 * and action_exec with `ok` and a result at once; pings are answered by `ws` itself.
 *
 *   node --import tsx scripts/bench/device-sim.ts SPEC.json   (SPEC: { url, prefix, tokens })
 * Prints "connected N" once all are open, then "closed N" lines if any drop.
 */
import { readFileSync } from "node:fs";
import WebSocket from "ws";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8")) as { url: string; prefix: string; tokens: string[] };
const wsUrl = `${spec.url.replace(/^http/, "ws")}/api/v1/devices/ws`;
const trigger = `${spec.prefix}.builtins.trigger_update_check`;
const capability = JSON.stringify({ method: "capability_report", capabilities: { exec_cmds: true } });
const actionList = JSON.stringify({ method: "action_list_update", actions: [{ action_id: trigger, action_name: "Check updates", command: [], timeout: 0 }] });
const output = Buffer.from("Update check queued").toString("base64");

let open = 0;
let closed = 0;
function connect(token: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer token=${token}` }, perMessageDeflate: false });
    ws.on("open", () => {
      open += 1;
      ws.send(capability);
      resolve();
    });
    ws.on("message", (data) => {
      const message = JSON.parse(String(data)) as { method: string; execution_id?: string };
      if (message.method === "action_list_query") ws.send(actionList);
      else if (message.method === "action_exec") {
        ws.send(JSON.stringify({ method: "action_exec_control", execution_id: message.execution_id, status: "ok" }));
        ws.send(JSON.stringify({ method: "action_exec_result", execution_id: message.execution_id, status_code: 0, output }));
      }
    });
    ws.on("error", reject);
    ws.on("close", () => {
      if (open > 0) process.stdout.write(`closed ${++closed}\n`);
    });
  });
}

// A few hundred handshakes at a time: a burst of thousands would only queue in the backlog.
const queue = [...spec.tokens];
await Promise.all(
  Array.from({ length: 50 }, async () => {
    for (let token = queue.shift(); token !== undefined; token = queue.shift()) await connect(token);
  }),
);
process.stdout.write(`connected ${open}\n`);
