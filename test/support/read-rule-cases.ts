/**
 * The fixture both written-out read rules are checked on (author_posts_page, the home page's
 * INBOX_RULE_SQL): author `au`'s posts of each visibility with a token below (3) and above (7) the
 * projection's watermark (5) and a deleted one, and readers in each relation to `au`, where the
 * truth (relation) and the projection (proj_follower) differ for `lagging` (unfollowed, the
 * projection has not applied it) and `unseen` (followed, the projection has not seen it).
 */
import type { Pool } from "../../src/db/pool.ts";

/** The readers of the rule's cases besides `au` itself. */
export const RULE_CASE_READERS = [
  "fol",
  "pend",
  "gone",
  "blocked",
  "blocker",
  "stranger",
  "lagging",
  "unseen",
] as const;
/** Readers who follow `au` and are blocked by it (`blockedfol`) or block it (`blockerfol`): a state writes never leave. */
export const FOLLOW_AND_BLOCK_READERS = ["blockedfol", "blockerfol"] as const;

const POSTS: [id: string, visibility: string, aclToken: number, minutesAgo: number][] = [
  ["pub-old", "PUBLIC", 3, 60],
  ["fol-old", "FOLLOWERS", 3, 59],
  ["self-old", "SELF", 3, 58],
  ["gone-post", "PUBLIC", 3, 50],
  ["pub-new", "PUBLIC", 7, 10],
  ["fol-new", "FOLLOWERS", 7, 11],
  ["self-new", "SELF", 7, 12],
];

/** Accounts, relations, projection, blocks and posts of the cases; `followAndBlock` adds FOLLOW_AND_BLOCK_READERS. */
export async function insertReadRuleCases(pool: Pool, options: { followAndBlock?: boolean } = {}): Promise<void> {
  const both = options.followAndBlock ?? false;
  const readers = ["au", ...RULE_CASE_READERS, ...(both ? FOLLOW_AND_BLOCK_READERS : [])];
  await pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[])", [readers]);
  await pool.query(`INSERT INTO relation (follower, followee, state, version) VALUES
    ('fol', 'au', 'ACTIVE', 1), ('pend', 'au', 'PENDING', 1), ('gone', 'au', 'REMOVED', 2),
    ('lagging', 'au', 'REMOVED', 2), ('unseen', 'au', 'ACTIVE', 1),
    ('blocked', 'au', 'REMOVED', 2), ('blocker', 'au', 'REMOVED', 2)`);
  await pool.query(`INSERT INTO proj_follower (followee, follower, state, version, since) VALUES
    ('au', 'fol', 'ACTIVE', 1, now()), ('au', 'pend', 'PENDING', 1, now()), ('au', 'gone', 'REMOVED', 2, now()),
    ('au', 'lagging', 'ACTIVE', 1, now())`);
  await pool.query("INSERT INTO block (blocker, blocked) VALUES ('au', 'blocked'), ('blocker', 'au')");
  if (both) {
    await pool.query(
      "INSERT INTO relation (follower, followee, state, version) VALUES ('blockedfol', 'au', 'ACTIVE', 1), ('blockerfol', 'au', 'ACTIVE', 1)",
    );
    await pool.query(
      "INSERT INTO proj_follower (followee, follower, state, version, since) VALUES ('au', 'blockedfol', 'ACTIVE', 1, now()), ('au', 'blockerfol', 'ACTIVE', 1, now())",
    );
    await pool.query("INSERT INTO block (blocker, blocked) VALUES ('au', 'blockedfol'), ('blockerfol', 'au')");
  }
  await pool.query("UPDATE event_seq SET last = 9");
  await pool.query("UPDATE proj_watermark SET applied_upto = 5");
  for (const [id, visibility, token, ago] of POSTS) {
    await pool.query("INSERT INTO item (item_id, kind) VALUES ($1, 'post')", [id]);
    await pool.query(
      `INSERT INTO post (post_id, author, visibility, body, part, acl_token, created_at)
       VALUES ($1, 'au', $2, 'text of ' || $1, 0, $3, now() - $4 * interval '1 minute')`,
      [id, visibility, token, ago],
    );
  }
  await pool.query("UPDATE post SET body = '', deleted_at = now() WHERE post_id = 'gone-post'");
}
