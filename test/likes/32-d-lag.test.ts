import { test } from "node:test";
import assert from "node:assert/strict";
import { readCount, readSide, readSideClean } from "../../src/likes/like-audit.ts";
import { factCount, likesFixture, user } from "./fixture.ts";
import type { LikesFixture } from "./fixture.ts";

const ALLOWED_LAG = 16;

/** 30 likes, 20 on item-lab-01; the first 20 events hold 14 of item-lab-01 (chapter 32-D). */
function plan(): { userId: string; itemId: string }[] {
  const others = ["item-lab-02", "item-lab-03", "item-lab-04"];
  const first = [
    ...Array.from({ length: 14 }, (_, i) => ({ userId: user(i + 1), itemId: "item-lab-01" })),
    ...Array.from({ length: 6 }, (_, i) => ({ userId: user(i + 1), itemId: others[i % 3]! })),
  ];
  const rest = [
    ...Array.from({ length: 6 }, (_, i) => ({ userId: user(i + 15), itemId: "item-lab-01" })),
    ...Array.from({ length: 4 }, (_, i) => ({ userId: user(i + 7), itemId: others[i % 3]! })),
  ];
  return [...first, ...rest];
}

async function assertBounds(f: LikesFixture): Promise<void> {
  for (const item of ["item-lab-01", "item-lab-02", "item-lab-03", "item-lab-04"]) {
    const r = await readCount(f.db.pool, item, ALLOWED_LAG);
    const truth = await factCount(f.db, item);
    assert.ok(Math.abs(r.n - truth) <= r.pendingForItem, `${item}: |${r.n} - ${truth}| > ${r.pendingForItem}`);
    assert.ok(r.pendingForItem <= r.lag);
    assert.equal(r.stale, r.lag > ALLOWED_LAG);
    // The boundary: a lag equal to the allowed lag is within it; one less allowed is stale.
    assert.equal(
      (await readCount(f.db.pool, item, r.lag)).stale,
      false,
      `${item}: lag ${r.lag} with allowedLag ${r.lag} is not stale`,
    );
    if (r.lag > 0)
      assert.equal(
        (await readCount(f.db.pool, item, r.lag - 1)).stale,
        true,
        `${item}: lag ${r.lag} with allowedLag ${r.lag - 1} is stale`,
      );
  }
  const side = await readSide(f.db.pool);
  assert.ok(readSideClean(side), JSON.stringify(side));
}

test("32-D P=1 lag definition, stale flag and both error bounds, with the chapter's figures", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  for (const { userId, itemId } of plan()) assert.equal((await f.likes.like(userId, itemId)).outcome, "CHANGED");

  const before = await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG);
  const truth = await factCount(f.db, "item-lab-01");
  const line1 = `item-lab-01 n=${before.n} lag=${before.lag} pendingForItem=${before.pendingForItem} stale=${before.stale} truth=${truth}`;
  t.diagnostic(`note no consumer yet: ${line1}`);
  assert.equal(line1, "item-lab-01 n=0 lag=30 pendingForItem=20 stale=true truth=20");
  await assertBounds(f);

  const batch = await f.consumer.applyBatch(await f.consumer.fetchPending(0, 20));
  const mid = await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG);
  const line2 =
    `applied=${batch.applied} covered=${batch.covered} dup=${batch.dup} watermark=${batch.watermark} | ` +
    `item-lab-01 n=${mid.n} lag=${mid.lag} pendingForItem=${mid.pendingForItem} stale=${mid.stale}`;
  t.diagnostic(`note after 20 events: ${line2}`);
  assert.equal(line2, "applied=20 covered=0 dup=0 watermark=20 | item-lab-01 n=14 lag=10 pendingForItem=6 stale=false");
  assert.equal(Math.abs(mid.n - truth), 6, "the item-level bound is tight here: |14 - 20| = 6");
  const stale = await Promise.all(
    [10, 9].map(async (allowed) => (await readCount(f.db.pool, "item-lab-01", allowed)).stale),
  );
  assert.deepEqual(
    stale,
    [false, true],
    "stale means lag > allowedLag: lag 10 is fresh for allowedLag 10, stale for 9",
  );
  await assertBounds(f);

  await f.consumer.drain();
  const after = await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG);
  const line3 = `item-lab-01 n=${after.n} lag=${after.lag} pendingForItem=${after.pendingForItem} stale=${after.stale}`;
  t.diagnostic(`note drained: ${line3}`);
  assert.equal(line3, "item-lab-01 n=20 lag=0 pendingForItem=0 stale=false");
  await assertBounds(f);
});

test("32-D P=4 lag is the sum over partitions and the bounds hold at every step", async (t) => {
  const f = await likesFixture(4);
  t.after(() => f.close());
  for (const { userId, itemId } of plan()) await f.likes.like(userId, itemId);
  const before = await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG);
  assert.deepEqual(before, { n: 0, lag: 30, pendingForItem: 20, stale: true });
  await assertBounds(f);
  // Consume one partition at a time; after each, lag drops by exactly that partition's events.
  let lag = 30;
  for (let part = 0; part < 4; part++) {
    const events = await f.consumer.fetchPending(part, 1000);
    if (events.length > 0) await f.consumer.applyBatch(events);
    lag -= events.length;
    const r = await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG);
    t.diagnostic(
      `note P=4 after partition ${part}: n=${r.n} lag=${r.lag} pendingForItem=${r.pendingForItem} stale=${r.stale}`,
    );
    assert.equal(r.lag, lag);
    await assertBounds(f);
  }
  assert.deepEqual(await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG), {
    n: 20,
    lag: 0,
    pendingForItem: 0,
    stale: false,
  });
});

test("32-D P=1 a gap in the processed events holds the watermark: lag and pendingForItem count the events of the gap, and the bound stays tight", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  for (const { userId, itemId } of plan()) await f.likes.like(userId, itemId);
  const events = await f.consumer.fetchPending(0, 30);
  // Events 1..10 and 15..20 are applied; 11..14 (four likes of item-lab-01) are not delivered yet.
  const batch = await f.consumer.applyBatch(events.filter((e) => e.seq <= 10 || (e.seq >= 15 && e.seq <= 20)));
  assert.deepEqual([batch.applied, batch.watermark], [16, 10], "the watermark stops below the gap");
  const gap = await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG);
  const truth = await factCount(f.db, "item-lab-01");
  const line = `item-lab-01 n=${gap.n} lag=${gap.lag} pendingForItem=${gap.pendingForItem} stale=${gap.stale} truth=${truth}`;
  t.diagnostic(`note gap 11..14: ${line}`);
  // lag = last - watermark = 30 - 10 (events 15..20 are processed but above the gap);
  // pendingForItem = the gap's 4 likes of item-lab-01 plus its 6 in 21..30.
  assert.equal(line, "item-lab-01 n=10 lag=20 pendingForItem=10 stale=true truth=20");
  assert.equal(Math.abs(gap.n - truth), gap.pendingForItem, "the bound is tight: the gap's events are what is missing");
  await assertBounds(f);

  const filled = await f.consumer.applyBatch(events.filter((e) => e.seq >= 11 && e.seq <= 14));
  assert.deepEqual(
    [filled.applied, filled.watermark],
    [4, 20],
    "the gap filled, the watermark moves over the processed run above it",
  );
  assert.deepEqual(await readCount(f.db.pool, "item-lab-01", ALLOWED_LAG), {
    n: 14,
    lag: 10,
    pendingForItem: 6,
    stale: false,
  });
  await assertBounds(f);
});
