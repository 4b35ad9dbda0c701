/**
 * Deliberately wrong reads and plans, kept only so tests can show that the checks catch them. Never use them.
 */
import type { Pool } from "../../src/db/pool.ts";
import { planFromFacts, type FeedPlanner, type PlanRow } from "../../src/feed/feed-consumer.ts";
import { HOME_PAGE_SQL, INBOX_RULE_SQL } from "../../src/feed/feed-reads.ts";
import type { HotSetShare } from "../../src/feed/feed-sources.ts";

const READ_TIME_RULE = `AND ${INBOX_RULE_SQL}`;

/**
 * The home page as the inbox holds it, without the read-time rule (what Mastodon serves: the
 * insert-time filter only). A post fanned out to a reader just before its author blocked the
 * reader, or merged just before the reader unfollowed, is on the page until the relation event
 * is applied.
 */
export async function inboxPageWithoutReadTimeRule(pool: Pool, reader: string): Promise<string[]> {
  if (!HOME_PAGE_SQL.includes(READ_TIME_RULE)) throw new Error("HOME_PAGE_SQL no longer holds the read-time rule");
  const { rows } = await pool.query<{ post_id: string }>(HOME_PAGE_SQL.replace(READ_TIME_RULE, ""), [
    reader,
    null,
    null,
    201,
  ]);
  return rows.map((r) => r.post_id);
}

/**
 * A plan read from what the relation event says instead of from the relation as it is now (the
 * chapter's unversioned projection): a follow event applied after the unfollow merges the
 * followee's posts back, and nothing ever takes them out again.
 */
export const planFromEventState: FeedPlanner = async (client, source, part, fresh, maxItems) => {
  if (source.name !== "relations") return planFromFacts(client, source, part, fresh, maxItems);
  const { rows } = await client.query<PlanRow>(
    `SELECT CASE WHEN o.state = 'ACTIVE' THEN 'add' ELSE 'remove' END AS op, o.follower AS reader, p.post_id, p.author
       FROM relation_event o JOIN post p ON p.author = o.followee AND p.deleted_at IS NULL
      WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])`,
    [part, fresh],
  );
  return rows;
};

/**
 * The posts a hot-author merge would show a reader without the read-time rule: every post, live
 * or deleted, of any visibility, of a hot author the reader has a relation row with in any state
 * (followed once, unfollowed since, blocked since).
 */
export async function mergedWithoutReadTimeRule(pool: Pool, reader: string): Promise<string[]> {
  const { rows } = await pool.query<{ post_id: string }>(
    `SELECT p.post_id FROM feed_hot_author h JOIN relation r ON r.follower = $1 AND r.followee = h.author
       JOIN post p ON p.author = h.author ORDER BY p.created_at DESC, p.post_id DESC`,
    [reader],
  );
  return rows.map((r) => r.post_id);
}

/** The home page without de-duplicating the inbox and the merge (UNION ALL): a post in both shows twice. */
export async function homePageWithoutDedup(pool: Pool, reader: string): Promise<string[]> {
  const union = "(SELECT * FROM inbox UNION SELECT * FROM merged)";
  if (!HOME_PAGE_SQL.includes(union)) throw new Error("HOME_PAGE_SQL no longer unions the inbox and the merge");
  const { rows } = await pool.query<{ post_id: string }>(
    HOME_PAGE_SQL.replace(union, "(SELECT * FROM inbox UNION ALL SELECT * FROM merged)"),
    [reader, null, null, 201],
  );
  return rows.map((r) => r.post_id);
}

/** feed_truth as it was before hot authors: every followee's posts, hot or not (what the audit would expect without the exclusion). */
export async function truthWithHotAuthors(pool: Pool): Promise<void> {
  const { rows } = await pool.query<{ def: string }>("SELECT pg_get_viewdef('feed_truth'::regclass) AS def");
  if (!rows[0]!.def.includes("feed_hot_author")) throw new Error("feed_truth no longer excludes hot authors");
  await pool.query(`CREATE OR REPLACE VIEW feed_truth AS
    SELECT r.follower AS reader, p.post_id, p.author, p.created_at AS at
      FROM relation r JOIN post p ON p.author = r.followee
     WHERE r.state = 'ACTIVE' AND p.deleted_at IS NULL
       AND post_readable(r.follower, p.author, p.visibility, p.part, p.acl_token, 'TRUTH')
    UNION ALL
    SELECT p.author, p.post_id, p.author, p.created_at FROM post p WHERE p.deleted_at IS NULL`);
}

/**
 * A plan that leaves out absent readers when it is read, before their feed_reader rows are
 * locked (instead of deciding after the lock, as withoutAbsentReaders does): a returning
 * reader's rebuild that is installing the inbox, not yet committed, is not seen, so a post
 * committed after the rebuild's snapshot reaches neither the rebuild nor the fan-out.
 */
export const planSkippingAbsentBeforeLock =
  (absentMs: number): FeedPlanner =>
  async (client, source, part, fresh, maxItems) => {
    const plan = await planFromFacts(client, source, part, fresh, maxItems);
    const { rows } = await client.query<{ reader: string }>(
      `SELECT reader FROM feed_reader WHERE reader = ANY ($1::text[])
          AND (skipped_since IS NOT NULL OR last_read_at < now() - make_interval(secs => $2::bigint / 1000.0))`,
      [[...new Set(plan.map((r) => r.reader))], absentMs],
    );
    const absent = new Set(rows.map((r) => r.reader));
    return plan.filter((r) => r.op === "remove" || !absent.has(r.reader));
  };

/**
 * An install of a reader's truth that does not take the hot set's lock (FeedRebuild's `hotSet`):
 * it reads the truth while a heating batch is uncommitted, or commits its rows after the heating
 * read which rows to remove, and the hot author's rows stay in the inbox as `extra`.
 */
export const hotSetUnlocked: HotSetShare = async () => {};
