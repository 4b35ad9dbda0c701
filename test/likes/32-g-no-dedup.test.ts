import { test } from "node:test";
import assert from "node:assert/strict";
import { applyWithoutDedup } from "./negative-controls.ts";
import { readSide, readSideClean } from "../../src/likes/like-audit.ts";
import { addStats } from "../../src/likes/like-consumer.ts";
import { seededRandom, shuffle } from "../support/concurrency.ts";
import { LAB_ITEMS, factCount, likesFixture, user, type LikesFixture } from "./fixture.ts";
import { allEvents, competingConsumers, deliver } from "./delivery.ts";
import type { LikeConsumer } from "../../src/likes/like-consumer.ts";

async function writeUntilEvents(f: LikesFixture, target: number, random: () => number): Promise<void> {
  let events = await eventCount(f);
  while (events < target) {
    const u = user(1 + Math.floor(random() * 60));
    const item = LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!;
    const r = await (random() < 0.7 ? f.likes.like(u, item) : f.likes.unlike(u, item));
    if (r.outcome === "CHANGED") events++;
  }
}

async function eventCount(f: LikesFixture): Promise<number> {
  const { rows } = await f.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_outbox");
  return rows[0]!.n;
}

/** Three competing pullers, then 29 old events redelivered (the same picks for both consumers). */
async function consumeWithRedelivery(f: LikesFixture, consumer: LikeConsumer, partitions: number, seed: number) {
  const stats = await competingConsumers(f.db.pool, consumer, 3, partitions, 40);
  const redelivered = shuffle(await allEvents(consumer, partitions), seededRandom(seed)).slice(0, 29);
  addStats(stats, await deliver(consumer, redelivered, 10));
  return stats;
}

async function countsByItem(f: LikesFixture): Promise<Map<string, number>> {
  const { rows } = await f.db.pool.query<{ item_id: string; n: number }>(
    "SELECT item_id, sum(n)::int AS n FROM like_count GROUP BY item_id",
  );
  return new Map(rows.map((r) => [r.item_id, r.n]));
}

for (const partitions of [1, 4]) {
  test(`32-G P=${partitions} negative control: a consumer without dedup over-applies; rebuild repairs and reports the drift`, async (t) => {
    const f = await likesFixture(partitions);
    t.after(() => f.close());
    const random = seededRandom(3207);
    await writeUntilEvents(f, 243, random);

    const dedup = await consumeWithRedelivery(f, f.consumer, partitions, 29);
    const clean = await readSide(f.db.pool);
    t.diagnostic(
      `note dedup consumers: applied=${dedup.applied} covered=${dedup.covered} dup=${dedup.dup} watermark=${clean.watermark}`,
    );
    assert.equal(dedup.applied, 243);
    assert.equal(clean.countMismatchItems, 0);
    assert.ok(readSideClean(clean));

    // Clear the derived side and replay the same deliveries through the consumer without dedup.
    await f.db.pool.query("TRUNCATE like_count, processed_event");
    await f.db.pool.query("UPDATE counter_watermark SET applied_upto = 0");
    const noDedup = await consumeWithRedelivery(f, f.consumerWith(applyWithoutDedup), partitions, 29);
    const broken = await readSide(f.db.pool);
    const wrong = await countsByItem(f);
    t.diagnostic(
      `note no-dedup consumers: applied=${noDedup.applied} covered=0 dup=0 watermark=${broken.watermark} (applications=${noDedup.applied} for 243 events)`,
    );
    for (const item of LAB_ITEMS)
      t.diagnostic(`note   ${item} count=${wrong.get(item) ?? 0} facts=${await factCount(f.db, item)}`);
    assert.ok(broken.exactViolations > 0, "the read-side identity sees the over-application");
    assert.ok(broken.countMismatchItems > 0);

    const report = await f.rebuild.rebuild();
    t.diagnostic(
      `note rebuild: ${report.drifted.map((d) => `${d.itemId} ${d.oldN}->${d.newN} (drift ${d.drift})`).join(", ")} total |drift|=${report.totalAbsDrift}`,
    );
    assert.equal(report.drifted.length, broken.countMismatchItems);
    for (const d of report.drifted) assert.equal(d.newN, await factCount(f.db, d.itemId));
    const { rows } = await f.db.pool.query<{ items_drifted: number; total_abs_drift: number }>(
      "SELECT items_drifted, total_abs_drift FROM like_rebuild_run WHERE run_id = $1",
      [report.runId],
    );
    assert.deepEqual(rows[0], { items_drifted: report.drifted.length, total_abs_drift: report.totalAbsDrift });
    assert.ok(readSideClean(await readSide(f.db.pool)));

    // Fifty more requests, maintained incrementally on the new baseline.
    for (let i = 0; i < 50; i++) {
      const u = user(1 + Math.floor(random() * 60));
      const item = LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!;
      await (random() < 0.6 ? f.likes.like(u, item) : f.likes.unlike(u, item));
    }
    await f.consumer.drain();
    const end = await readSide(f.db.pool);
    t.diagnostic(
      `note after 50 more requests and drain: count_mismatch_items=${end.countMismatchItems} exact_violations=${end.exactViolations}`,
    );
    assert.equal(end.countMismatchItems, 0);
    assert.ok(readSideClean(end));
    const second = await f.rebuild.rebuild();
    assert.equal(second.drifted.length, 0, "a rebuild of a healthy derived side reports no drift");
  });
}
