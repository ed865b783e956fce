/**
 * Benchmark (figures printed, nothing asserted): what a deployment adds per device on the server,
 * in-process and without HTTP or sockets, so that other load on the machine moves it little.
 *
 *   node --import tsx scripts/bench/deployment-steps.ts [--devices 2000] [--rounds 3]
 *
 * N devices in one group (as bench:deployment seeds them), a one-phase deployment to v2; then,
 * device after device, what the update check does for it (the deployment's offer and the progress
 * record, as src/update/updatecheck/check.ts calls them) and what its `update_outcome` installed
 * does (DeploymentService.outcome). Prints the CPU time of this process per device for each step
 * (the median of --rounds deployments, each on fresh devices), and the statements, transactions
 * and journal frames each step ran.
 */
import { apiAs, inProcessServer, seedFleet } from "./server.ts";
import { flag } from "./flags.ts";

const DEVICES = flag("devices", 2000);
const ROUNDS = flag("rounds", 3);

const { server, url, close } = await inProcessServer();
const admin = server.ctx.tokens.issueManagement("bench", ["admin_rw"], 86400);
const call = apiAs(url, admin);
const { update } = server.domains;
const { deployments } = update;
const { progress } = update;

// Counts what the embedded database runs: statements, transactions begun, frames made durable.
const db = server.embedded as unknown as Record<string, (...args: unknown[]) => unknown>;
const counted = { statements: 0, transactions: 0, frames: 0 };
for (const [name, key] of [["execute", "statements"], ["all", "statements"], ["get", "statements"], ["begin", "transactions"], ["appendDurably", "frames"]] as const) {
  const original = db[name].bind(db);
  db[name] = (...args: unknown[]) => {
    counted[key] += 1;
    return original(...args);
  };
}
const snapshot = () => ({ ...counted });
const per = (before: typeof counted, n: number) => Object.entries(counted).map(([k, v]) => `${((v - before[k as keyof typeof counted]) / n).toFixed(2)} ${k}`).join(", ");
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const fleet = await seedFleet(server, call, DEVICES * ROUNDS, 0x040000000000, "exact_match,v1.5");
const results = { offer: [] as number[], outcome: [] as number[] };
const counts = { offer: "", outcome: "" };
for (let round = 0; round < ROUNDS; round++) {
  // Each round's deployment goes to devices of their own group, none of which was in a deployment before.
  const rows = fleet.rows.slice(round * DEVICES, (round + 1) * DEVICES);
  const group = (await call<{ id: number }>("POST", "/api/v2/groups", { metadata: { name: `round ${round}` }, priority: -1 - round })).id;
  await call("POST", `/api/v2/groups/${group}/policy`, { policy: "exact_match,v1.5" });
  await call("POST", `/api/v2/groups/${group}/package`, { packages: fleet.packages });
  await call("PATCH", `/api/v2/groups/${group}/devices`, { add: rows.map((r) => r.id), remove: [] });
  const created = await call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2", phases: [100] });
  let before = snapshot();
  let started = cpu();
  for (const device of rows) {
    const steer = deployments.steer(device.id, group, Date.now(), "v1.5");
    if (!steer || steer === "hold") throw new Error(`device ${device.id} is not offered: ${steer}`);
    await steer.recordOffer("v2", "v1", device.mac_address);
    await progress.recordUpdateStart(device.id, device.mac_address, "v2");
  }
  results.offer.push((cpu() - started) / DEVICES);
  counts.offer = per(before, DEVICES);
  before = snapshot();
  started = cpu();
  for (const device of rows) {
    await deployments.outcome({ deviceId: device.id, mac: device.mac_address }, { reportId: `r-${device.id}`, deployment: created.id, attempt: 1, state: "installed", version: "v2", fromVersion: "v1", reason: null, output: null });
  }
  results.outcome.push((cpu() - started) / DEVICES);
  counts.outcome = per(before, DEVICES);
  const view = await call<{ status: string }>("GET", `/api/v2/deployments/${created.id}`);
  if (view.status !== "completed") throw new Error(`deployment ${created.id} is ${view.status}`);
}
console.log(`deployment steps, in-process: ${DEVICES} devices, ${ROUNDS} rounds; load average ${(await import("node:os")).loadavg().map((l) => l.toFixed(2)).join(" ")}`);
console.log(`offer (first check in the deployment): ${median(results.offer).toFixed(0)} us CPU per device (rounds: ${results.offer.map((v) => v.toFixed(0)).join(", ")}); ${counts.offer}`);
console.log(`outcome installed:                     ${median(results.outcome).toFixed(0)} us CPU per device (rounds: ${results.outcome.map((v) => v.toFixed(0)).join(", ")}); ${counts.outcome}`);
await close();
process.exit(0);
