import type { Pool } from "../db/pool.ts";
import { Hooks } from "../hooks.ts";
import type { CountStore } from "./count-store.ts";
import type { CounterKind } from "./counter-kinds.ts";

/**
 * Seed 003's naive repair, kept to show what the split counter prevents: recount the facts and
 * overwrite the whole counter. Increments applied between the recount and the overwrite are
 * lost. Hook point "reconcile.beforeInstall" as in the Reconciler, so a test can interleave.
 */
export async function naiveRecountAndOverwrite(pool: Pool, store: CountStore, kind: CounterKind, target: string, hooks = new Hooks()): Promise<void> {
  const { rows } = await pool.query<{ n: number }>(kind.truthSql, [[target], null]);
  await hooks.at("reconcile.beforeInstall", { kind: kind.name, targets: [target] });
  const key = store.counterKey(kind.name, target);
  if (store.redis.topology === "cluster") {
    for (let i = 0; i < store.buckets; i++) await store.redis.sendCommand(["HSET", store.bucketKey(kind.name, target, i), "d", "0"]);
  } else {
    await store.redis.sendCommand(["HDEL", key, ...Array.from({ length: store.buckets }, (_, i) => `b${i}`)]);
  }
  await store.redis.sendCommand(["HSET", key, "base", String(rows[0]!.n)]);
}
