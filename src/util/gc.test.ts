import { strict as assert } from "node:assert";
import { test } from "node:test";
import { getHeapSpaceStatistics } from "node:v8";
import { runInNewContext } from "node:vm";
import { collectAllGarbage, collectYoungGarbage } from "./gc.ts";

const youngSize = () => getHeapSpaceStatistics().find((space) => space.space_name === "new_space")!.space_used_size;

for (const [name, collect] of [
  ["collectYoungGarbage", collectYoungGarbage],
  ["collectAllGarbage", collectAllGarbage],
] as const) {
  test(`util/gc: ${name} frees the young generation's garbage, and V8's expose-gc flag is set back (it is part of the hash Node's built-in code cache must match)`, () => {
    let garbage: unknown[] | undefined = Array.from({ length: 20_000 }, (_, i) => ({ i }));
    const before = youngSize();
    assert.ok(garbage.length > 0 && before > 100_000, `young generation before: ${before} B`);
    garbage = undefined;
    collect();
    assert.ok(youngSize() < before, `young generation after: ${youngSize()} B, before ${before} B`);
    assert.equal(runInNewContext("typeof gc"), "undefined", "a new context gets no gc: the flag is unset again");
  });
}
