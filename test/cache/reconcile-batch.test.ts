/**
 * The reconciler installs a batch of targets in one pipelined round trip, and a target
 * whose install fails in that batch fails alone. One batch holds good targets, a drifted one
 * (overcounted by a direct HINCRBY) and a malformed one (a log entry that is not `<part>:<seq>`):
 * the report names exactly the drift and the failure, the good ones are installed, the malformed
 * counter is dropped and backfilled, and the boundary advances. The negative control is a batch
 * install that gives up on the batch at the first failure (installBatchAllOrNothing): the same
 * batch then reports every target failed, and the test's expected report catches it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { LikeService } from "../../src/likes/like-service.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { reconciledKey } from "../../src/cache/count-keys.ts";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { Reconciler, type BatchInstall, type ReconcileReport } from "../../src/cache/reconciler.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { connectRedis } from "../../src/cache/redis-connection.ts";
import { installBatchAllOrNothing } from "./negative-controls.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

async function lab(t: { after: (fn: () => Promise<void>) => void }) {
  const db = await createTestDatabase({ partitions: 2 });
  const server = await TestRedis.start();
  const redis = await connectRedis(server.url);
  t.after(async () => {
    await redis.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const likes = await LikeService.open(db.pool);
  const store = new CountStore(redis, 4);
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS);
  await feeder.pollOnce();
  const reader = new CountReader(db.pool, store, { localTtlMs: 0 });
  const facts = async (item: string) =>
    (
      await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact WHERE item_id = $1 AND liked", [
        item,
      ])
    ).rows[0]!.n;
  return { db, redis, likes, store, feeder, reader, facts };
}

type Lab = Awaited<ReturnType<typeof lab>>;

/**
 * Items p-good-0..5, p-drift, p-bad, all backfilled and then changed, so one run visits them all
 * in one batch; p-drift overcounted by 3, p-bad's log holds "garbage". Runs one reconciliation.
 */
async function batchWithOneBadTarget(
  l: Lab,
  prefix: string,
  install?: BatchInstall,
): Promise<{ report: ReconcileReport; items: string[] }> {
  const items = [...Array.from({ length: 6 }, (_, i) => `${prefix}-good-${i}`), `${prefix}-drift`, `${prefix}-bad`];
  for (const item of items) {
    await l.likes.createItem(item);
    await l.likes.like(`${prefix}-u0`, item);
    assert.equal((await l.reader.read(LIKE_COUNTS, item, { allowedLag: 0 })).count, 1, `backfill of ${item}`);
  }
  const reconciler = new Reconciler(l.db.pool, l.store, { batchSize: 100, install });
  await reconciler.reconcile(LIKE_COUNTS); // the boundary starts after the backfills
  await l.redis.sendCommand(["HINCRBY", l.store.counterKey("likes", `${prefix}-drift`), "b0", "3"]);
  await l.redis.sendCommand(["HSET", l.store.logKey("likes", `${prefix}-bad`), "garbage", "1"]);
  for (const item of items) await l.likes.like(`${prefix}-u1`, item);
  while ((await l.feeder.pollOnce()) > 0);
  return { report: await reconciler.reconcile(LIKE_COUNTS), items };
}

const summary = (r: ReconcileReport) => ({
  visited: r.visited,
  installed: r.installed,
  drifted: r.drifted.map((d) => [d.target, d.truth, d.displayed, d.drift]),
  failed: r.failed.map((f) => [f.target, f.dropped]),
});

test("one batch: the drifted target is reported with its drift, the malformed one fails alone and is dropped, the good ones are installed", async (t) => {
  const l = await lab(t);
  const { report, items } = await batchWithOneBadTarget(l, "b");
  assert.deepEqual(summary(report), {
    visited: 8,
    installed: 7,
    drifted: [["b-drift", 2, 5, -3]],
    failed: [["b-bad", true]],
  });
  assert.match(report.failed[0]!.reason, /malformed.*garbage/);
  // The malformed counter was dropped (its next read backfills it); the others hold the truth.
  assert.equal(await l.redis.sendCommand<number>(["EXISTS", l.store.counterKey("likes", "b-bad")]), 0, "b-bad dropped");
  for (const item of items)
    assert.deepEqual(
      await l.reader.read(LIKE_COUNTS, item, { allowedLag: 0 }).then((r) => [r.source, r.count]),
      ["cache", await l.facts(item)],
      item,
    );
  // Every failure was dropped, so the boundary advanced to the present: a second run visits nothing.
  const positions = (await l.db.pool.query<{ part: number; last: number }>(LIKE_COUNTS.positionsSql)).rows;
  assert.deepEqual(
    await l.redis.hGetAll(reconciledKey("likes")),
    Object.fromEntries(positions.map((p) => [String(p.part), String(p.last)])),
  );
  assert.equal((await new Reconciler(l.db.pool, l.store).reconcile(LIKE_COUNTS)).visited, 0);
});

test("control: a batch install that drops the whole batch on one failure reports every target failed, which the expected report catches", async (t) => {
  const l = await lab(t);
  const { report } = await batchWithOneBadTarget(l, "c", installBatchAllOrNothing);
  t.diagnostic(`control report: ${JSON.stringify(summary(report))}`);
  assert.notDeepEqual(summary(report), {
    visited: 8,
    installed: 7,
    drifted: [["c-drift", 2, 5, -3]],
    failed: [["c-bad", true]],
  });
  assert.equal(report.failed.length, 8, "the good and the drifted targets went down with the bad one");
  assert.deepEqual(report.drifted, [], "and the drift was never measured");
});
