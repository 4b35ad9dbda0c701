/**
 * The feed bench's generator (support/feed-population.ts) makes the graph it describes: about
 * 100 follows per account, the most followed account followed by half of them, the hot readers
 * following every hot author, the relation and its projection equal, the posts as counted, and
 * every secondary index it dropped built again.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createTestDatabase } from "../support/test-db.ts";
import { generateFeedPopulation } from "../../support/feed-population.ts";
import { HOT_AUTHORS, POSTS_PER_ACCOUNT, POSTS_PER_HOT_ACCOUNT } from "../../support/feed-population-sql.ts";

test("the feed population has the described shape", async (t) => {
  const db = await createTestDatabase({ partitions: 4 });
  t.after(() => db.close());
  const indexes = async () =>
    (
      await db.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_indexes WHERE tablename IN ('relation', 'proj_follower', 'item', 'post')",
      )
    ).rows[0]!.n;
  const before = await indexes();
  const pop = await generateFeedPopulation(db.pool, 2000);
  assert.equal(await indexes(), before, "every dropped index is built again");
  assert.ok(pop.follows / pop.accounts > 90 && pop.follows / pop.accounts < 110, `${pop.follows} follows`);
  assert.ok(pop.largestFollowers >= 0.45 * pop.accounts, `largest ${pop.largestFollowers}`);
  assert.equal(pop.posts, (pop.accounts - HOT_AUTHORS) * POSTS_PER_ACCOUNT + HOT_AUTHORS * POSTS_PER_HOT_ACCOUNT);
  const { rows } = await db.pool.query<{ missing: number; differ: number; biggest: string }>(
    `SELECT (SELECT count(*) FROM unnest($1::text[]) r, unnest($2::text[]) a
              WHERE NOT EXISTS (SELECT 1 FROM relation x WHERE x.follower = r AND x.followee = a AND x.state = 'ACTIVE'))::int AS missing,
            (SELECT count(*) FROM (SELECT follower, followee FROM relation EXCEPT SELECT follower, followee FROM proj_follower) d)::int AS differ,
            (SELECT followee FROM proj_count ORDER BY n DESC LIMIT 1) AS biggest`,
    [pop.hotReaders, pop.hotAuthors],
  );
  assert.deepEqual(rows[0], { missing: 0, differ: 0, biggest: pop.hotAuthors[0] });
});
