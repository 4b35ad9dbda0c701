import { test } from "node:test";
import assert from "node:assert/strict";
import { followerCount, listFollowers } from "../../src/relations/relation-reads.ts";
import { acct, relationsFixture } from "./fixture.ts";

for (const partitions of [1, 4]) {
  test(`30-list P=${partitions} follower pages stay stable while followers come and go: no duplicate, no skip of a follower present throughout`, async (t) => {
    const f = await relationsFixture(partitions, 200);
    t.after(() => f.close());
    const star = acct(200);
    for (let i = 1; i <= 60; i++) await f.rel.follow(acct(i), star);
    await f.projector.drain();
    const initial = new Set((await listFollowers(f.db.pool, star, { limit: 200 })).followers.map((x) => x.accountId));
    assert.equal(initial.size, 60);

    const seen: string[] = [];
    const removed = new Set<string>();
    let cursor: string | undefined;
    let page = 0;
    do {
      const result = await listFollowers(f.db.pool, star, { limit: 7, ...(cursor ? { cursor } : {}) });
      seen.push(...result.followers.map((x) => x.accountId));
      cursor = result.nextCursor;
      // Between pages: new followers arrive, some existing ones leave, and the projector runs.
      page++;
      await f.rel.follow(acct(100 + page), star);
      if (page % 2 === 0) {
        const leaver = acct(page * 3);
        await f.rel.unfollow(leaver, star);
        removed.add(leaver);
      }
      await f.projector.drain();
    } while (cursor);

    const duplicates = seen.filter((id, i) => seen.indexOf(id) !== i);
    const skipped = [...initial].filter((id) => !removed.has(id) && !seen.includes(id));
    t.diagnostic(
      `note pages=${page} rows=${seen.length} duplicates=${duplicates.length} skipped=${skipped.length} removed meanwhile=${removed.size}`,
    );
    assert.deepEqual(duplicates, []);
    assert.deepEqual(skipped, []);
    const count = await followerCount(f.db.pool, star, 0);
    const truth = (await listFollowers(f.db.pool, star, { limit: 200 })).followers.length;
    assert.deepEqual(count, { count: truth, lag: 0, stale: false });
  });
}

test("30-list P=1 negative control: OFFSET paging over the same changes repeats rows", async (t) => {
  const f = await relationsFixture(1, 200);
  t.after(() => f.close());
  const star = acct(200);
  for (let i = 1; i <= 60; i++) await f.rel.follow(acct(i), star);
  await f.projector.drain();
  const seen: string[] = [];
  for (let page = 0; page < 9; page++) {
    const { rows } = await f.db.pool.query<{ follower: string }>(
      `SELECT follower FROM proj_follower WHERE followee = $1 AND state = 'ACTIVE'
        ORDER BY since DESC, follower DESC LIMIT 7 OFFSET $2`,
      [star, page * 7],
    );
    seen.push(...rows.map((r) => r.follower));
    await f.rel.follow(acct(101 + page), star);
    await f.projector.drain();
  }
  const duplicates = seen.filter((id, i) => seen.indexOf(id) !== i).length;
  t.diagnostic(`note offset paging: rows=${seen.length} duplicates=${duplicates}`);
  assert.ok(duplicates > 0, "newest-first OFFSET paging shows a row again when a new follower arrives");
});
