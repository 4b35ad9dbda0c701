/**
 * The reconciler is paced like the other background jobs (src/workers/pacer.ts). Over
 * 1,200 changed counters, a batch's size follows the time budget from the last full batch (×2 or
 * ÷2 per batch, within [MIN_PACED_RECONCILE_BATCH, batchSize]) and after each batch but the last
 * the run rests in proportion to it per the duty, and really waits that long: the run's wall time
 * from its first install to its last covers the rests asked for. The budgets make the sizes
 * deterministic: 10 s is more than any batch takes (every full batch doubles), 0.001 ms is less
 * (every full batch halves). Pacing changes only how the targets are cut: each run installs every
 * counter at the facts, with no drift, and leaves the boundary at the present. The negative
 * control is the UNPACED reconciler on the same changes: batches of 500 back to back, which the
 * pacing check rejects. The rests are production timers; nothing here waits on them to synchronise.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { reconciledKey } from "../../src/cache/count-keys.ts";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { MIN_PACED_RECONCILE_BATCH, Reconciler } from "../../src/cache/reconciler.ts";
import { connectRedis } from "../../src/cache/redis-connection.ts";
import { InvalidInputError } from "../../src/errors.ts";
import { Hooks } from "../../src/hooks.ts";
import { MAX_REST_MS, UNPACED, type PacingOptions } from "../../src/workers/pacer.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

const PARTITIONS = 2;
const ITEMS = 1200;
const item = (i: number) => `pace-${i}`;

async function lab(t: { after: (fn: () => Promise<void>) => void }) {
  const db = await createTestDatabase({ partitions: PARTITIONS });
  const server = await TestRedis.start();
  // This file checks batch sizes and rests, not Redis's deadline: the production 200 ms was
  // missed by the unpaced control's 500-install batches at load average 12.
  const redis = await connectRedis(server.url, { commandTimeoutMs: 5_000 });
  t.after(async () => {
    await redis.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const store = new CountStore(redis, 4);
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS);
  const likeAll = (user: string) =>
    db.pool.query(
      "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set($2, 'pace-' || i, true, ledger_partition($2, $3))",
      [ITEMS, user, PARTITIONS],
    );
  await db.pool.query(
    "INSERT INTO item (item_id, kind) SELECT 'pace-' || i, 'plain' FROM generate_series(1, $1::int) i",
    [ITEMS],
  );
  await likeAll("u-0");
  // Every counter in Redis at the present, as backfilling reads would leave them, and the feeder's cursor and the reconciled boundary there too.
  const positions = async () => (await db.pool.query<{ part: number; last: number }>(LIKE_COUNTS.positionsSql)).rows;
  const bound = (await positions()).map((p) => p.last);
  for (let i = 1; i <= ITEMS; i += 200) {
    const entries = Array.from({ length: Math.min(200, ITEMS - i + 1) }, (_, k) => ({ target: item(i + k), truth: 1 }));
    for (const r of await store.installBatch("likes", entries, bound, false))
      if (r.status === "rejected") throw r.reason;
  }
  await feeder.pollOnce();
  await redis.hSet(
    reconciledKey("likes"),
    Object.fromEntries((await positions()).map((p) => [String(p.part), String(p.last)])),
  );
  let round = 0;
  /** One more like on every item, fed to Redis: ITEMS changed counters for the next run. */
  const change = async () => {
    await likeAll(`u-${++round}`);
    while ((await feeder.pollOnce()) > 0);
  };
  return { db, redis, store, positions, change, likes: () => round + 1 };
}

type Lab = Awaited<ReturnType<typeof lab>>;

interface Batch {
  size: number;
  installAt: number;
  ms?: number;
  restMs?: number;
  endAt?: number;
}

/** One reconciliation of ITEMS changed counters with `pacing`: its batches as the hook points saw them, checked for exactness. */
async function run(l: Lab, pacing: PacingOptions): Promise<Batch[]> {
  await l.change();
  const hooks = new Hooks();
  const batches: Batch[] = [];
  hooks.on(
    "reconcile.beforeInstall",
    (ctx) => void batches.push({ size: (ctx.targets as string[]).length, installAt: performance.now() }),
  );
  hooks.on("reconcile.betweenBatches", (ctx) => {
    const b = batches.at(-1)!;
    assert.equal(ctx.size, b.size);
    Object.assign(b, { ms: ctx.ms as number, restMs: ctx.restMs as number, endAt: performance.now() });
  });
  const report = await new Reconciler(l.db.pool, l.store, { hooks, pacing }).reconcile(LIKE_COUNTS);
  assert.deepEqual(
    [report.visited, report.installed, report.drifted.length, report.failed.length],
    [ITEMS, ITEMS, 0, 0],
  );
  assert.equal(
    batches.reduce((n, b) => n + b.size, 0),
    ITEMS,
    "every changed target in exactly one batch",
  );
  // The boundary semantics are pacing's to keep: the stored boundary is the present, and every counter shows its facts.
  assert.deepEqual(
    await l.redis.hGetAll(reconciledKey("likes")),
    Object.fromEntries((await l.positions()).map((p) => [String(p.part), String(p.last)])),
  );
  for (let i = 1; i <= ITEMS; i += 97) assert.equal((await l.store.read("likes", item(i)))?.count, l.likes(), item(i));
  return batches;
}

/**
 * What a paced run must show: the sizes the budget picks (starting at 64, ×2 or ÷2 per full batch,
 * within [MIN_PACED_RECONCILE_BATCH, 500]), after every batch but the last a rest of
 * ms × (1 − duty) / duty asked for, and the run's wall time covering those rests.
 */
function assertPaced(batches: readonly Batch[], pacing: PacingOptions, sizes: readonly number[]): void {
  assert.deepEqual(
    batches.map((b) => b.size),
    sizes,
    "batch sizes",
  );
  const between = batches.slice(0, -1);
  assert.ok(
    between.every((b) => b.restMs !== undefined) && batches.at(-1)!.restMs === undefined,
    "the hook point between batches, not after the last",
  );
  for (const b of between)
    assert.equal(
      b.restMs,
      Math.min(MAX_REST_MS, (b.ms! * (1 - pacing.duty)) / pacing.duty),
      "the rest follows the duty",
    );
  const rests = between.reduce((s, b) => s + b.restMs!, 0);
  assert.ok(rests > 0, "rests asked for");
  // From the first install to the last the run did the batches' work and rested between them. A
  // timer may fire up to the event loop's cached clock early, hence 0.75; without the rests the
  // wall time is about the work, which with duty 0.25 is a third of the rests.
  const wall = batches.at(-1)!.installAt - batches[0]!.installAt;
  assert.ok(wall >= 0.75 * rests, `the run waited ${wall.toFixed(1)} ms for ${rests.toFixed(1)} ms of rests`);
}

/** 64, then halving after every full batch to the floor, the rest of ITEMS last. */
function shrinking(): number[] {
  const sizes = [64];
  let left = ITEMS - 64;
  while (left > 0) {
    const next = Math.max(MIN_PACED_RECONCILE_BATCH, sizes.at(-1)! / 2);
    sizes.push(Math.min(left, next));
    left -= sizes.at(-1)!;
  }
  return sizes;
}

const SLOW: PacingOptions = { budgetMs: 0.001, duty: 0.25 };
const FAST: PacingOptions = { budgetMs: 10_000, duty: 0.25 };

test("paced reconciliation: batches shrink to the floor under a small budget and grow to at most 500 under a large one, each followed by the rest the duty asks for, and every counter ends at its facts", async (t) => {
  const l = await lab(t);
  const small = await run(l, SLOW);
  assert.equal(small[1]!.size, MIN_PACED_RECONCILE_BATCH, "64 halves to 32, raised to the floor");
  assertPaced(small, SLOW, shrinking());
  const large = await run(l, FAST);
  // 64 + 128 + 256 = 448, then 512 capped at 500, then the remaining 252.
  assertPaced(large, FAST, [64, 128, 256, 500, 252]);
});

test("control: the unpaced reconciler (UNPACED) cuts the same changes into batches of 500 back to back, which the pacing check rejects", async (t) => {
  const l = await lab(t);
  const batches = await run(l, UNPACED);
  assert.deepEqual(
    batches.map((b) => [b.size, b.restMs]),
    [
      [500, 0],
      [500, 0],
      [200, undefined],
    ],
  );
  assert.throws(() => assertPaced(batches, SLOW, shrinking()), assert.AssertionError);
  assert.throws(
    () =>
      assertPaced(
        batches,
        { budgetMs: 0.001, duty: 0.25 },
        batches.map((b) => b.size),
      ),
    /rest/,
  );
});

test("a reconciler's batch size must be a positive integer (typed error)", async () => {
  for (const bad of [0, -1, 1.5, Number.NaN]) {
    assert.throws(
      () => new Reconciler(undefined as never, undefined as never, { batchSize: bad }),
      InvalidInputError,
      String(bad),
    );
  }
  assert.throws(
    () => new Reconciler(undefined as never, undefined as never, { pacing: { budgetMs: -1, duty: 0.5 } }),
    InvalidInputError,
  );
});
