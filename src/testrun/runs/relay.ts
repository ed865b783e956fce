/*
 * The run stream across the nodes of a cluster: each node tells the others of its run and trigger
 * changes (after the commit), so that `GET /api/v1/test-runs/stream` on any node carries them all.
 * A change whose record would not fit a cluster message goes as its id, and the others read it.
 */
import type { Cluster } from "../../cluster/cluster.ts";
import type { RunChange, RunStore } from "./store.ts";

/** Bytes of a change sent whole; a larger one goes as its id (a cluster message holds a few KiB). */
const WHOLE_CHANGE_BYTES = 6000;

/** A change as another node sends it: whole, or only what names the record to read. */
type RelayedChange = RunChange | { kind: "run" | "trigger"; id: string; reference: true };

/** Relays this node's changes to the others and emits theirs, in the order they came, through `emit`. */
export function relayRunChanges(cluster: Pick<Cluster, "publish" | "on">, store: Pick<RunStore, "getRun" | "getTrigger">, emit: (change: RunChange) => void, warn: (message: string) => void) {
  let received = Promise.resolve();
  cluster.on("test_run_changed", (data) => {
    received = received
      .then(async () => {
        const change = await resolved(store, data as RelayedChange);
        if (change) emit(change);
      })
      .catch((error: Error) => warn(`test-run stream: another node's change not read: ${error.message}`));
  });
  return (change: RunChange): void => {
    const whole = JSON.stringify(change);
    cluster.publish("test_run_changed", whole.length <= WHOLE_CHANGE_BYTES ? change : ({ kind: change.kind, id: change.id, reference: true } as RelayedChange));
  };
}

async function resolved(store: Pick<RunStore, "getRun" | "getTrigger">, change: RelayedChange): Promise<RunChange | undefined> {
  if (typeof change?.id !== "string") return undefined;
  if (!("reference" in change)) return change.kind === "run" || change.kind === "trigger" || change.kind === "run-deleted" ? change : undefined;
  if (change.kind === "run") {
    const run = await store.getRun(change.id);
    return run && { kind: "run", id: run.id, run };
  }
  const trigger = await store.getTrigger(change.id);
  return trigger && { kind: "trigger", id: trigger.id, trigger };
}
