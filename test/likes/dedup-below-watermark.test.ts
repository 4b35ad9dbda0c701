/**
 * Dedup does not depend on processed_event keys at or below the watermark: the consumer treats
 * every delivered seq at or below its partition's (contiguous) watermark as a duplicate. So a
 * retention rule may prune processed_event below the watermark, and a redelivery of a pruned
 * event counts nothing. The negative control prunes above the watermark (below the highest
 * processed seq, past a gap): redelivered events whose keys are gone count twice.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readSide, readSideClean } from "../../src/likes/like-audit.ts";
import { count, factCount, likesFixture, user, type LikesFixture } from "./fixture.ts";

async function likeCount(f: LikesFixture, item: string): Promise<number> {
  return count(f.db, "SELECT coalesce(sum(n), 0) AS n FROM like_count WHERE item_id = $1", [item]);
}

async function watermark(f: LikesFixture): Promise<number> {
  return count(f.db, "SELECT applied_upto AS n FROM counter_watermark WHERE part = 0");
}

/** What a retention rule would do: drop the dedup keys at or below `boundary`. */
async function prune(f: LikesFixture, boundary: number): Promise<number> {
  const { rowCount } = await f.db.pool.query("DELETE FROM processed_event WHERE part = 0 AND seq <= $1", [boundary]);
  return rowCount ?? 0;
}

/** 20 likes of `item` by new users; everything but `gapSeq` applied, so the watermark stops below it. */
async function likesWithGap(
  f: LikesFixture,
  item: string,
  firstUser: number,
  gapSeq: number,
): Promise<{ from: number; to: number }> {
  const seqs: number[] = [];
  for (let u = firstUser; u < firstUser + 20; u++) seqs.push((await f.likes.like(user(u), item)).seq);
  const [from, to] = [seqs[0]!, seqs[seqs.length - 1]!];
  const events = await f.consumer.fetchRange(0, from, to);
  await f.consumer.applyBatch(events.filter((e) => e.seq !== gapSeq));
  return { from, to };
}

test("P=1 pruning processed_event at the watermark: redelivered old events are duplicates, the count stays exact", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  const item = "item-lab-01";
  const { from, to } = await likesWithGap(f, item, 1, 5);
  assert.equal(await watermark(f), 4, "the gap at seq 5 holds the watermark at 4");
  assert.equal(await prune(f, await watermark(f)), 4);
  const early = await f.consumer.applyBatch(await f.consumer.fetchRange(0, 1, 4));
  assert.deepEqual([early.applied, early.covered, early.dup], [0, 0, 4]);

  await f.consumer.applyBatch(await f.consumer.fetchRange(0, 5, 5)); // the gap closes
  assert.equal(await watermark(f), to);
  const pruned = await prune(f, to);
  const again = await f.consumer.applyBatch(await f.consumer.fetchRange(0, from, to));
  t.diagnostic(
    `note pruned ${pruned} keys at watermark ${to}; redelivery of ${to - from + 1}: applied=${again.applied} dup=${again.dup}`,
  );
  assert.deepEqual([again.applied, again.covered, again.dup], [0, 0, 20]);
  assert.equal(await likeCount(f, item), await factCount(f.db, item));
  assert.ok(readSideClean(await readSide(f.db.pool)));
});

test("negative control: pruning above the watermark (past a gap) lets redelivered events count twice", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  const item = "item-lab-02";
  const { from, to } = await likesWithGap(f, item, 1, 5);
  assert.equal(await watermark(f), from + 3);
  const pruned = await prune(f, to); // unsafe: the highest processed seq, not the watermark
  const again = await f.consumer.applyBatch((await f.consumer.fetchRange(0, from, to)).filter((e) => e.seq !== 5));
  const n = await likeCount(f, item);
  const facts = await factCount(f.db, item);
  t.diagnostic(
    `note pruned ${pruned} keys up to ${to} with the watermark at ${from + 3}: applied again ${again.applied}, count ${n} vs ${facts} facts`,
  );
  assert.equal(again.applied, 15, "the 15 events above the watermark whose keys were pruned are applied again");
  assert.equal(n, facts - 1 + 15, "double counted (the gap event is still pending)");
});
