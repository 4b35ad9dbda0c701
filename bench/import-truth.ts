/** The ledger after an import against its own facts: facts per kind, and the derived counts and projection recomputed from the facts. */
import type { Pool } from "../src/db/pool.ts";

export interface ImportTruth {
  /** Accounts, erased ones (tombstones) included. */
  accounts: number;
  liked: number;
  /** Relation rows ACTIVE or PENDING. */
  following: number;
  blocks: number;
  /** Items whose like_count sum differs from their liked facts. */
  countMismatches: number;
  /** Follow pairs whose proj_follower row differs from the relation, plus followees whose proj_count differs from their ACTIVE followers. */
  projectionMismatches: number;
}

const TRUTH = `
  SELECT (SELECT count(*) FROM account)::int AS accounts,
         (SELECT count(*) FROM like_fact WHERE liked)::int AS liked,
         (SELECT count(*) FROM relation WHERE state IN ('ACTIVE', 'PENDING'))::int AS following,
         (SELECT count(*) FROM block)::int AS blocks,
         (SELECT count(*) FROM (SELECT item_id, count(*) AS n FROM like_fact WHERE liked GROUP BY item_id) f
            FULL JOIN (SELECT item_id, sum(n) AS n FROM like_count GROUP BY item_id HAVING sum(n) <> 0) c USING (item_id)
           WHERE f.n IS DISTINCT FROM c.n)::int AS count_mismatches,
         (SELECT count(*) FROM (SELECT follower, followee, state FROM relation WHERE state IN ('ACTIVE', 'PENDING')) r
            FULL JOIN (SELECT follower, followee, state FROM proj_follower WHERE state IN ('ACTIVE', 'PENDING')) p USING (follower, followee)
           WHERE r.state IS DISTINCT FROM p.state)::int
       + (SELECT count(*) FROM (SELECT followee, count(*) AS n FROM relation WHERE state = 'ACTIVE' GROUP BY followee) f
            FULL JOIN (SELECT followee, n FROM proj_count WHERE n <> 0) c USING (followee)
           WHERE f.n IS DISTINCT FROM c.n)::int AS projection_mismatches`;

export async function importTruth(pool: Pool): Promise<ImportTruth> {
  const r = (
    await pool.query<{
      accounts: number;
      liked: number;
      following: number;
      blocks: number;
      count_mismatches: number;
      projection_mismatches: number;
    }>(TRUTH)
  ).rows[0]!;
  return {
    accounts: r.accounts,
    liked: r.liked,
    following: r.following,
    blocks: r.blocks,
    countMismatches: r.count_mismatches,
    projectionMismatches: r.projection_mismatches,
  };
}
