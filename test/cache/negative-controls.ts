import type { Pool } from "../../src/db/pool.ts";
import { Hooks } from "../../src/hooks.ts";
import type { CountStore } from "../../src/cache/count-store.ts";
import type { CounterKind } from "../../src/cache/counter-kinds.ts";
import type { BatchInstall } from "../../src/cache/reconciler.ts";

/**
 * Seed 003's naive repair, kept to show what the split counter prevents: recount the facts and
 * overwrite the whole counter. Increments applied between the recount and the overwrite are
 * lost. Hook point "reconcile.beforeInstall" as in the Reconciler, so a test can interleave.
 */
export async function naiveRecountAndOverwrite(
  pool: Pool,
  store: CountStore,
  kind: CounterKind,
  target: string,
  hooks = new Hooks(),
): Promise<void> {
  const { rows } = await pool.query<{ n: number }>(kind.truthSql, [[target], null]);
  await hooks.at("reconcile.beforeInstall", { kind: kind.name, targets: [target] });
  const key = store.counterKey(kind.name, target);
  if (store.redis.topology === "cluster") {
    for (let i = 0; i < store.buckets; i++)
      await store.redis.sendCommand(["HSET", store.bucketKey(kind.name, target, i), "d", "0"]);
  } else {
    await store.redis.sendCommand(["HDEL", key, ...Array.from({ length: store.buckets }, (_, i) => `b${i}`)]);
  }
  await store.redis.sendCommand(["HSET", key, "base", String(rows[0]!.n)]);
}

/**
 * A batched install that gives up on the whole batch when one target fails (Promise.all): every
 * target of the batch is then reported failed and dropped, the good ones with the bad one. The
 * reconciler's installBatch reports the failing target alone; test/cache/reconcile-batch.test.ts
 * runs both.
 */
export const installBatchAllOrNothing: BatchInstall = async (store, kind, entries, bound) => {
  try {
    const outcomes = await Promise.all(entries.map((e) => store.install(kind, e.target, e.truth, bound, true)));
    return outcomes.map((value) => ({ status: "fulfilled", value }));
  } catch (reason) {
    return entries.map(() => ({ status: "rejected", reason }));
  }
};
