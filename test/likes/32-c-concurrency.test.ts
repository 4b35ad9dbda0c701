import { test } from "node:test";
import assert from "node:assert/strict";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { count, likesFixture, user } from "./fixture.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";

for (const partitions of [1, 4]) {
  test(`32-C P=${partitions} 16 workers like the same pair: CHANGED=1 NOOP=15, one event`, async (t) => {
    const f = await likesFixture(partitions);
    t.after(() => f.close());
    const results = await runWorkers(16, () => f.likes.like(user(1), "item-lab-01"));
    const changed = results.filter((r) => r.outcome === "CHANGED").length;
    const noop = results.filter((r) => r.outcome === "NOOP").length;
    t.diagnostic(`note same pair x16: CHANGED=${changed} NOOP=${noop}`);
    assert.equal(changed, 1);
    assert.equal(noop, 15);
    assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox"), 1);
    assert.deepEqual(await f.likes.hasLiked(user(1), "item-lab-01"), { liked: true, version: 1 });
  });

  test(`32-C P=${partitions} 8 workers, 320 interleaved like/unlike on one pair: CHANGED = events = version`, async (t) => {
    const f = await likesFixture(partitions);
    t.after(() => f.close());
    const random = seededRandom(32);
    const plan = Array.from({ length: 8 }, () => Array.from({ length: 40 }, () => random() < 0.5));
    const results = await runWorkers(8, async (w) => {
      const mine = [];
      for (const want of plan[w]!) {
        mine.push(await (want ? f.likes.like(user(2), "item-lab-02") : f.likes.unlike(user(2), "item-lab-02")));
      }
      return mine;
    });
    const all = results.flat();
    const changed = all.filter((r) => r.outcome === "CHANGED").length;
    const events = await count(f.db, "SELECT count(*) AS n FROM like_outbox WHERE user_id = $1", [user(2)]);
    const deltaSum = await count(f.db, "SELECT coalesce(sum(delta), 0) AS n FROM like_outbox WHERE user_id = $1", [
      user(2),
    ]);
    const state = await f.likes.hasLiked(user(2), "item-lab-02");
    t.diagnostic(
      `note 320 interleaved: CHANGED=${changed} events=${events} version=${state.version} deltaSum=${deltaSum} liked=${state.liked}`,
    );
    assert.equal(all.length, 320);
    assert.equal(changed, events);
    assert.equal(events, state.version);
    assert.equal(deltaSum, state.liked ? 1 : 0);
    // Seqs of the CHANGED results are unique and gapless within the partition.
    const seqs = all
      .filter((r) => r.outcome === "CHANGED")
      .map((r) => r.seq)
      .sort((a, b) => a - b);
    assert.deepEqual(
      seqs,
      Array.from({ length: changed }, (_, i) => i + 1),
    );
    assert.ok(writeSideClean(await writeSide(f.db.pool)));
  });
}
