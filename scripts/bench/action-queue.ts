/**
 * Benchmark (figures printed, nothing asserted): queued actions of a fan-out (issue 25 item 7). A
 * user with `update` on D offline devices (default 2,000, through a group) repeats the fan-out R
 * times (default 10): per request its time, how many devices got a queued row (202) and how many
 * a 429, and the action log's rows and the database's size (image and journal) after it, next to the baseline request
 * `GET /api/health`. The bounds: update_server.max_queued_actions per device, max_queued_per_request.
 *
 *   node --import tsx scripts/bench/action-queue.ts [--devices 2000] [--requests 10]
 */
import { flag } from "./flags.ts";
import { inProcessServer, insertDevices, ms } from "./server.ts";

const DEVICES = flag("devices", 2000);
const REQUESTS = flag("requests", 10);

const bench = await inProcessServer();
const { server, url } = bench;
try {
  let macs: string[] = [];
  const now = new Date().toISOString();
  await server.embedded!.write((tx) => {
    macs = insertDevices(tx, DEVICES, 0x020000000000);
    const group = tx.run("INSERT INTO groups (created, metadata, policy, priority) VALUES (?, '{}', '', 0)", [now]).lastInsertRowid;
    tx.run("INSERT INTO group_devices (group_id, device_id) SELECT ?, id FROM devices", [group]);
    for (const permission of ["read", "update"]) tx.run("INSERT INTO permissions (created, user_id, resource, resource_id, permission) VALUES (?, 'bench-ops', 'group', ?, ?)", [now, group, permission]);
  });
  const token = server.ctx.tokens.issueManagement("bench-ops", ["tests_ro"], 3600);
  /** The database on disk: image and journal. */
  const stored = () => {
    const status = server.embedded!.status();
    return status.image_bytes + status.journal_bytes;
  };
  const rows = () => server.embedded!.get<{ n: number }>("SELECT COUNT(*) AS n FROM action_log")!.n;
  const { max_queued_actions: perDevice, max_queued_per_request: perRequest } = server.ctx.config.update_server;

  const health = performance.now();
  await (await fetch(`${url}/api/health`)).arrayBuffer();
  console.log(`${DEVICES} offline devices; max_queued_actions ${perDevice}, max_queued_per_request ${perRequest}`);
  console.log(`baseline: GET /api/health ${ms(performance.now() - health)}`);
  for (let r = 1; r <= REQUESTS; r++) {
    const started = performance.now();
    const res = await fetch(`${url}/api/v2/devices/action/exec`, {
      method: "POST",
      headers: { authorization: `Bearer token=${token}`, "content-type": "application/json" },
      body: JSON.stringify({ action_id: "uptime", devices: macs }),
    });
    const { results } = (await res.json()) as { results: Array<{ status: number }> };
    const took = performance.now() - started;
    const count = (status: number) => results.filter((x) => x.status === status).length;
    console.log(
      `request ${String(r).padStart(2)}: ${ms(took)}  queued ${String(count(202)).padStart(5)}  429 ${String(count(429)).padStart(5)}  action log rows ${String(rows()).padStart(7)}  database ${(stored() / 1048576).toFixed(1).padStart(6)} MiB`,
    );
  }
} finally {
  await bench.close();
}
