import { test } from "node:test";
import assert from "node:assert/strict";
import { readSide, readSideClean } from "../../src/likes/like-audit.ts";
import { seededRandom, shuffle } from "../support/concurrency.ts";
import { LAB_ITEMS, factCount, likesFixture, user } from "./fixture.ts";
import { allEvents, deliver } from "./delivery.ts";

for (const partitions of [1, 4]) {
  test(`32-E P=${partitions} duplicated and reordered deliveries leave the count exact`, async (t) => {
    const f = await likesFixture(partitions);
    t.after(() => f.close());
    const random = seededRandom(3205);
    for (let i = 0; i < 120; i++) {
      const u = user(1 + Math.floor(random() * 20));
      const item = LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!;
      await (random() < 0.65 ? f.likes.like(u, item) : f.likes.unlike(u, item));
    }
    const events = await allEvents(f.consumer, partitions);
    const duplicates = events.filter(() => random() < 0.5);
    const deliveries = shuffle([...events, ...duplicates], random);

    // Deliver the first half only: the watermark stops at the first gap, and the identity holds mid-way.
    const half = Math.floor(deliveries.length / 2);
    const first = await deliver(f.consumer, deliveries.slice(0, half), 7);
    const mid = await readSide(f.db.pool);
    t.diagnostic(
      `note half delivered: applied=${first.applied} dup=${first.dup} watermark=${mid.watermark} lag=${mid.lag} unprocessed=${mid.unprocessed} exact_violations=${mid.exactViolations} bound_violations=${mid.boundViolations}`,
    );
    assert.ok(readSideClean(mid), JSON.stringify(mid));
    assert.ok(mid.unprocessed <= mid.lag);

    const second = await deliver(f.consumer, deliveries.slice(half), 7);
    const applied = first.applied + second.applied;
    const dup = first.dup + second.dup;
    t.diagnostic(`note events=${events.length} deliveries=${deliveries.length} applied=${applied} dup=${dup}`);
    assert.equal(applied, events.length);
    assert.equal(dup, deliveries.length - events.length);
    const end = await readSide(f.db.pool);
    assert.equal(end.lag, 0);
    assert.equal(end.countMismatchItems, 0);
    for (const item of LAB_ITEMS) {
      const { rows } = await f.db.pool.query<{ n: number }>(
        "SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = $1",
        [item],
      );
      assert.equal(rows[0]!.n, await factCount(f.db, item), item);
    }
  });
}
